// Module header: the trainer's infrastructure — configuration with verl's keys, loggers,
// checkpoints, metrics, the PPO trainer and its recipes; with PCRE2 the SFT trainer and the built-in
// tasks, with yaml-cpp verl's YAML files. Needs nlohmann-json.
#pragma once

#include "verl/trainer/config.hpp"
#include "verl/trainer/metrics.hpp"
#include "verl/trainer/validation_metrics.hpp"
#include "verl/trainer/timer.hpp"
#include "verl/optim.hpp"
#include "verl/trainer/logging/metrics_logger.hpp"
#include "verl/trainer/logging/console_logger.hpp"
#include "verl/trainer/logging/file_logger.hpp"
#include "verl/trainer/logging/tensorboard_logger.hpp"
#include "verl/trainer/logging/tracking.hpp"
#include "verl/trainer/logging/svg_plot.hpp"
#include "verl/trainer/checkpoint.hpp"
#include "verl/trainer/layouts.hpp"
#include "verl/trainer/components_from_config.hpp"
#include "verl/trainer/safe_rlhf_config.hpp"
#include "verl/trainer/controller_calls.hpp"
#include "verl/trainer/ppo_trainer.hpp"
#include "verl/trainer/recipes.hpp"

// The SFT trainer, the prompt chat templates and the built-in tasks tokenize text (PCRE2).
#if __has_include(<pcre2.h>)
#include "verl/trainer/controller_inputs.hpp"
#include "verl/trainer/prompt_chat_template.hpp"
#include "verl/trainer/sft_trainer.hpp"
#include "verl/trainer/tasks/arithmetic.hpp"
#include "verl/trainer/tasks/greedy_accuracy.hpp"
#endif
// verl's YAML configuration files (yaml-cpp).
#if __has_include(<yaml-cpp/yaml.h>)
#include "verl/trainer/config_yaml.hpp"
#endif
