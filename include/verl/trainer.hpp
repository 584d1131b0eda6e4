// Module header: the trainer's infrastructure — configuration with verl's keys, loggers,
// checkpoints, optimizers and schedules, metrics. Needs nlohmann-json; YAML files are read by
// verl/trainer/config_yaml.hpp (needs yaml-cpp), which is included separately.
#pragma once

#include "verl/trainer/config.hpp"
#include "verl/trainer/metrics.hpp"
#include "verl/trainer/validation_metrics.hpp"
#include "verl/trainer/timer.hpp"
#include "verl/trainer/optim/optimizer.hpp"
#include "verl/trainer/optim/parameter.hpp"
#include "verl/trainer/optim/adamw.hpp"
#include "verl/trainer/optim/clip_grad_norm.hpp"
#include "verl/trainer/optim/optimizer_step.hpp"
#include "verl/trainer/optim/schedules.hpp"
#include "verl/trainer/optim/lr_schedule.hpp"
#include "verl/trainer/optim/lr_scheduler.hpp"
#include "verl/trainer/logging/metrics_logger.hpp"
#include "verl/trainer/logging/console_logger.hpp"
#include "verl/trainer/logging/file_logger.hpp"
#include "verl/trainer/logging/tensorboard_logger.hpp"
#include "verl/trainer/logging/tracking.hpp"
#include "verl/trainer/logging/svg_plot.hpp"
#include "verl/trainer/checkpoint.hpp"
#include "verl/trainer/components_from_config.hpp"
#include "verl/trainer/ppo_trainer.hpp"
#include "verl/trainer/recipes.hpp"
