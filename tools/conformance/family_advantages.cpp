// Conformance handlers for advantages.json: every verl advantage estimator, reached through
// make_advantage_estimator with the case's arguments mapped onto AdvantageConfig.
#include <map>
#include <string>
#include <string_view>

#include "handlers.hpp"
#include "verl/algo/advantages.hpp"

namespace verl::conformance {
namespace {

using algo::AdvantageConfig;

/// verl's function name -> its ADV_ESTIMATOR_REGISTRY name.
const std::map<std::string, std::string, std::less<>>& estimator_of_function() {
  static const std::map<std::string, std::string, std::less<>> table{
      {"compute_gae_advantage_return", "gae"},
      {"compute_grpo_outcome_advantage", "grpo"},
      {"compute_grpo_vectorized_outcome_advantage", "grpo_vectorized"},
      {"compute_grpo_passk_outcome_advantage", "grpo_passk"},
      {"compute_reinforce_plus_plus_outcome_advantage", "reinforce_plus_plus"},
      {"compute_reinforce_plus_plus_baseline_outcome_advantage", "reinforce_plus_plus_baseline"},
      {"compute_remax_outcome_advantage", "remax"},
      {"compute_rloo_outcome_advantage", "rloo"},
      {"compute_rloo_vectorized_outcome_advantage", "rloo_vectorized"},
      {"compute_opo_outcome_advantage", "opo"},
      {"compute_gpg_outcome_advantage", "gpg"},
      {"compute_optimal_token_baseline_advantage", "optimal_token_baseline"},
      {"compute_multi_turn_optimal_token_baseline_advantage", "tir_optimal_token_baseline"},
  };
  return table;
}

std::optional<bool> optional_bool(const json& object, const char* key) {
  if (!object.contains(key) || object.at(key).is_null()) return std::nullopt;
  return object.at(key).get<bool>();
}

/// The case's keyword arguments as AdvantageConfig. grpo_passk and reinforce_plus_plus read their
/// knob from verl's config object instead (passk ignores its keyword argument of the same name).
AdvantageConfig config_of(const GoldenCase& c, std::string_view estimator) {
  const json& args = c.args();
  AdvantageConfig config;
  if (auto v = optional_number(args, "gamma")) config.gamma = *v;
  if (auto v = optional_number(args, "lam")) config.lam = *v;
  if (auto v = optional_number(args, "epsilon")) config.epsilon = *v;
  if (auto v = optional_number(args, "f_norm")) config.f_norm = *v;
  if (auto v = optional_number(args, "alpha")) config.alpha = *v;
  if (auto v = optional_bool(args, "norm_adv_by_std_in_grpo")) config.norm_adv_by_std_in_grpo = *v;
  if (auto v = optional_bool(args, "handle_zero_tail")) config.handle_zero_tail = *v;
  if (estimator == "grpo_passk" || estimator == "reinforce_plus_plus") {
    VERL_CHECK_ARG(c.has_arg("config"), "config: verl's {} needs the algorithm config, got None", estimator);
    const json& algorithm = args.at("config");
    if (estimator == "grpo_passk") config.norm_adv_by_std_in_grpo = optional_bool(algorithm, "norm_adv_by_std_in_grpo").value_or(true);
    if (estimator == "reinforce_plus_plus") config.gamma = algorithm.at("gamma").get<double>();
  }
  return config;
}

void run_advantage_case(const GoldenCase& c, CaseCheck& check) {
  const auto entry = estimator_of_function().find(c.fn());
  VERL_CHECK_ARG(entry != estimator_of_function().end(), "fn: no advantage estimator for '{}'", c.fn());
  const std::string& estimator_name = entry->second;
  if (!c.registry_name().empty() && c.registry_name() != estimator_name)
    check.fail("registry_name", "registry_name '" + c.registry_name() + "' does not match fn " + c.fn());
  const auto estimator = algo::make_advantage_estimator(estimator_name, config_of(c, estimator_name));

  const MatrixF rewards = c.input_tensor("token_level_rewards").matrix<float>();
  const MatrixF mask = c.input_tensor("response_mask").matrix<float>();
  const std::vector<std::int64_t> index = c.has_input("index") ? c.input_tensor("index").int64s() : std::vector<std::int64_t>{};
  const auto optional_matrix = [&](const char* key) {
    return c.has_input(key) ? std::optional<MatrixF>(c.input_tensor(key).matrix<float>()) : std::nullopt;
  };
  const auto values = optional_matrix("values");
  const auto old_log_probs = optional_matrix("old_log_probs");
  const auto sum_pi_squared = optional_matrix("sum_pi_squared");
  const auto rollout_is_weights = optional_matrix("rollout_is_weights");
  const std::optional<VectorF> reward_baselines =
      c.has_input("reward_baselines") ? std::optional<VectorF>(c.input_tensor("reward_baselines").vector<float>())
                                      : std::nullopt;

  algo::AdvantageBatch batch{.token_level_rewards = rewards, .response_mask = mask, .index = index};
  if (values) batch.values.emplace(*values);
  if (old_log_probs) batch.old_log_probs.emplace(*old_log_probs);
  if (sum_pi_squared) batch.sum_pi_squared.emplace(*sum_pi_squared);
  if (rollout_is_weights) batch.rollout_is_weights.emplace(*rollout_is_weights);
  if (reward_baselines) batch.reward_baselines.emplace(*reward_baselines);

  const algo::AdvantageResult result = estimator.compute(batch);
  for (auto it = c.outputs().begin(); it != c.outputs().end(); ++it) {
    if (it.key() == "advantages") {
      check.tensor("advantages", result.advantages, c.tolerance());
    } else if (it.key() == "returns") {
      check.tensor("returns", result.returns(), c.tolerance());
    } else {
      check.fail(it.key(), "output '" + it.key() + "' has no C++ counterpart");
    }
  }
}

/// compute_gdpo_outcome_advantage: the multi-key path when config, non_tensor_batch and batch are
/// all given (the prompt / attention-mask tensors only place each score in its row, which the row
/// sum then ignores), else the fallback on token_level_rewards.
void gdpo_case(const GoldenCase& c, CaseCheck& check) {
  const json& args = c.args();
  algo::GDPO gdpo;
  if (auto v = optional_number(args, "epsilon")) gdpo.epsilon = *v;
  if (auto v = optional_bool(args, "norm_adv_by_std_in_grpo")) gdpo.norm_adv_by_std_in_grpo = *v;
  const bool has_config = args.contains("config") && !args.at("config").is_null();
  if (has_config) {
    const json& config = args.at("config");
    if (config.contains("gdpo_reward_weights") && !config.at("gdpo_reward_weights").is_null())
      gdpo.reward_weights = config.at("gdpo_reward_weights").get<std::vector<double>>();
  }
  const MatrixF rewards = c.input_tensor("token_level_rewards").matrix<float>();
  const MatrixF mask = c.input_tensor("response_mask").matrix<float>();
  const std::vector<std::int64_t> index = c.input_tensor("index").int64s();
  const algo::AdvantageBatch batch{.token_level_rewards = rewards, .response_mask = mask, .index = index};
  algo::AdvantageResult result;
  if (has_config && c.has_input("non_tensor_batch") && c.has_input("batch")) {
    const json& config = args.at("config");
    std::vector<std::string> keys;
    if (config.contains("gdpo_reward_keys") && !config.at("gdpo_reward_keys").is_null())
      keys = config.at("gdpo_reward_keys").get<std::vector<std::string>>();
    algo::RewardComponents components;
    for (auto it = c.inputs().at("non_tensor_batch").begin(); it != c.inputs().at("non_tensor_batch").end(); ++it)
      components.emplace(it.key(), testing::parse_tensor(it.value()).vector<float>());
    result = gdpo.compute(batch, keys, components);
  } else {
    result = gdpo.compute(batch);
  }
  check.tensor("advantages", result.advantages, c.tolerance());
  check.tensor("returns", result.returns(), c.tolerance());
}

void register_advantages(HandlerTable& table) {
  for (const auto& [function, estimator] : estimator_of_function()) table.emplace(function, run_advantage_case);
  table.emplace("compute_gdpo_outcome_advantage", gdpo_case);
}

const Registrar registrar{register_advantages};

}  // namespace
}  // namespace verl::conformance
