// Every KL estimator of verl (kl_penalty's names), the KL controllers and the in-reward KL penalty.
#pragma once

#include "verl/algo/kl/estimator.hpp"
#include "verl/algo/kl/penalty.hpp"
#include "verl/algo/kl/registry.hpp"
#include "verl/algo/kl/controller.hpp"
#include "verl/algo/kl/rewards.hpp"
