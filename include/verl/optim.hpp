// Module header: optimizers (AdamW), gradient clipping, parameters and learning-rate schedules.
#pragma once

#include "verl/optim/parameter.hpp"
#include "verl/optim/optimizer.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/clip_grad_norm.hpp"
#include "verl/optim/optimizer_step.hpp"
#include "verl/optim/schedules.hpp"
#include "verl/optim/lr_schedule.hpp"
#include "verl/optim/lr_scheduler.hpp"
