// The actor configuration of a policy-loss golden case under verl's keys, shared by the CPU
// handlers (family_policy_loss.cpp) and the CUDA path (cuda_handlers.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "handlers.hpp"
#include "verl/algo/policy_losses.hpp"

namespace verl::conformance {

inline algo::GlobalBatchInfo global_batch_info_from(const json& config) {
  algo::GlobalBatchInfo info;
  if (!config.contains("global_batch_info") || config.at("global_batch_info").is_null()) return info;
  const json& g = config.at("global_batch_info");
  if (const auto dp = optional_number(g, "dp_size")) info.dp_size = *dp;
  info.batch_num_tokens = optional_number(g, "batch_num_tokens");
  info.global_batch_size = optional_number(g, "global_batch_size");
  info.loss_scale_factor = optional_number(g, "loss_scale_factor");
  return info;
}

inline std::optional<std::string> optional_string(const json& object, const char* key) {
  if (!object.contains(key) || object.at(key).is_null()) return std::nullopt;
  return object.at(key).get<std::string>();
}

inline algo::RolloutCorrectionConfig rollout_correction_from(const json& rc) {
  algo::RolloutCorrectionConfig config;
  if (rc.contains("loss_type") && !rc.at("loss_type").is_null()) config.loss_type = rc.at("loss_type").get<std::string>();
  config.rollout_is = optional_string(rc, "rollout_is");
  if (rc.contains("rollout_is_threshold")) {
    const json& t = rc.at("rollout_is_threshold");
    if (t.is_null()) {
      config.rollout_is_threshold.reset();
    } else if (t.is_string()) {
      config.rollout_is_threshold = algo::ImportanceThresholdSpec(t.get<std::string>());
    } else {
      // verl raises TypeError for a bool or a list: so does the conformance case, through json's.
      VERL_CHECK_ARG(t.is_number(), "rollout_is_threshold: expected a number or a string, got {}", t.dump());
      config.rollout_is_threshold = algo::ImportanceThresholdSpec(t.get<double>());
    }
  }
  config.rollout_is_batch_normalize = rc.value("rollout_is_batch_normalize", false);
  config.rollout_rs = optional_string(rc, "rollout_rs");
  if (rc.contains("rollout_rs_threshold") && !rc.at("rollout_rs_threshold").is_null()) {
    const json& t = rc.at("rollout_rs_threshold");
    if (t.is_string()) {
      config.rollout_rs_threshold = algo::RejectionThresholdSpec(t.get<std::string>());
    } else {
      config.rollout_rs_threshold = algo::RejectionThresholdSpec(t.get<double>());
    }
  }
  return config;
}

/// The actor config of a case under verl's keys; absent keys keep their defaults (verl's code
/// does not read them for that loss).
inline algo::PolicyLossConfig policy_loss_config_from(const GoldenCase& c) {
  algo::PolicyLossConfig config;
  const json& args = c.args();
  const json empty = json::object();
  const json& actor = args.contains("config") && !args.at("config").is_null() ? args.at("config") : empty;
  if (const auto v = optional_number(actor, "clip_ratio")) config.clip_ratio = *v;
  if (actor.contains("clip_ratio_low")) config.clip_ratio_low = optional_number(actor, "clip_ratio_low");
  if (actor.contains("clip_ratio_high")) config.clip_ratio_high = optional_number(actor, "clip_ratio_high");
  if (const auto v = optional_number(actor, "clip_ratio_c")) {
    config.clip_ratio_c = *v;
  } else if (c.fn().starts_with("compute_policy_loss_dppo")) {
    config.clip_ratio_c = algo::DPPOTV{}.clip_ratio_c;  // verl's dppo reads the attribute with default 20
  }
  if (const auto v = optional_number(actor, "tau_pos")) config.tau_pos = *v;
  if (const auto v = optional_number(actor, "tau_neg")) config.tau_neg = *v;
  if (actor.contains("policy_loss") && !actor.at("policy_loss").is_null()) {
    const json& pl = actor.at("policy_loss");
    auto& options = config.policy_loss;
    if (pl.contains("clip_cov_ratio")) options.clip_cov_ratio = optional_number(pl, "clip_cov_ratio");
    if (pl.contains("clip_cov_lb")) options.clip_cov_lb = optional_number(pl, "clip_cov_lb");
    if (pl.contains("clip_cov_ub")) options.clip_cov_ub = optional_number(pl, "clip_cov_ub");
    if (pl.contains("kl_cov_ratio")) options.kl_cov_ratio = optional_number(pl, "kl_cov_ratio");
    if (pl.contains("ppo_kl_coef")) options.ppo_kl_coef = optional_number(pl, "ppo_kl_coef");
    if (pl.contains("dro_beta")) options.dro_beta = optional_number(pl, "dro_beta");
    if (pl.contains("rollout_correction") && !pl.at("rollout_correction").is_null())
      options.rollout_correction = rollout_correction_from(pl.at("rollout_correction"));
  }
  if (const auto seed = optional_number(args, "torch_seed")) config.clip_cov_seed = static_cast<std::uint64_t>(*seed);
  return config;
}

/// verl's registry name of a case's loss; fixtures without one name the function
/// compute_policy_loss_<name>.
inline std::string policy_loss_mode_of(const GoldenCase& c) {
  std::string loss_mode = c.registry_name();
  if (loss_mode.empty()) loss_mode = c.fn().substr(std::string_view("compute_policy_loss_").size());
  return loss_mode;
}

}  // namespace verl::conformance
