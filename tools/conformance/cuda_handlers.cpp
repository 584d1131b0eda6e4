// verl_conformance --device cuda: every golden case whose function has a kernel (every advantage
// estimator, agg_loss, kl_penalty, compute_rewards, every policy loss (bypass_mode with its
// rollout correction), value and entropy losses, and the functional family) runs through
// cuda_runner.hpp. Host-side argument checks come first (verl raises there; the kernels do not
// check), then the kernels, then the same comparisons as the CPU handlers. A case whose function
// (or configuration) has no kernel is reported as "unsupported on cuda" by main.cpp; this file
// only registers what it really runs.
// Linked into verl_conformance only when the build has CUDA (tools/conformance/CMakeLists.txt).
#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cuda_runner.hpp"
#include "handlers.hpp"
#include "policy_loss_config.hpp"
#include "verl/algo/advantages.hpp"
#include "verl/algo/entropy_loss.hpp"
#include "verl/algo/value_loss.hpp"
#include "verl/algo/advantages/detail/row_ops.hpp"
#include "verl/algo/kl/registry.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/masked_stats.hpp"
#include "verl/algo/policy_losses.hpp"

namespace verl::conformance {
namespace {

std::optional<bool> optional_bool(const json& object, const char* key) {
  if (!object.contains(key) || object.at(key).is_null()) return std::nullopt;
  return object.at(key).get<bool>();
}

void require_binary_mask(const MatrixF& mask, std::string_view argument) {
  for (Index i = 0; i < mask.rows(); ++i)
    algo::detail::require_binary_mask_row(argument, mask.data() + i * mask.cols(), mask.cols(), i);
}

// ---- advantages ----------------------------------------------------------------------------------

void compare_advantages(const GoldenCase& c, CaseCheck& check, const algo::AdvantageResult& result) {
  require_known_outputs(c, check, {"advantages", "returns"}, "cuda");
  if (c.outputs().contains("advantages")) check.tensor("advantages", result.advantages, c.tolerance());
  if (c.outputs().contains("returns")) check.tensor("returns", result.returns(), c.tolerance());
}

struct AdvantageInputs {
  MatrixF rewards, mask;
  std::vector<std::int64_t> index;
  std::optional<MatrixF> values;
  std::optional<VectorF> baselines;

  explicit AdvantageInputs(const GoldenCase& c)
      : rewards(c.input_tensor("token_level_rewards").matrix<float>()),
        mask(c.input_tensor("response_mask").matrix<float>()) {
    if (c.has_input("index")) index = c.input_tensor("index").int64s();
    if (c.has_input("values")) values = c.input_tensor("values").matrix<float>();
    if (c.has_input("reward_baselines")) baselines = c.input_tensor("reward_baselines").vector<float>();
  }
  /// The CPU estimator's argument checks (shapes, presence, 0/1 mask), on the host.
  template <class E>
  void validate() const {
    algo::AdvantageBatch batch{.token_level_rewards = rewards, .response_mask = mask, .index = index};
    if (values) batch.values.emplace(*values);
    if (baselines) batch.reward_baselines.emplace(*baselines);
    algo::detail::validate_advantage_batch<E>(batch);
    require_binary_mask(mask, "response_mask");
  }
};

template <class E>
void outcome_case(const GoldenCase& c, CaseCheck& check, kernels::OutcomeEstimator estimator) {
  const AdvantageInputs in(c);
  in.template validate<E>();
  kernels::OutcomeParams params;
  params.estimator = estimator;
  const json& args = c.args();
  if (auto v = optional_number(args, "epsilon")) params.epsilon = static_cast<float>(*v);
  if (auto v = optional_bool(args, "norm_adv_by_std_in_grpo")) params.norm_adv_by_std_in_grpo = *v;
  if (auto v = optional_number(args, "f_norm")) params.f_norm = static_cast<float>(*v);
  compare_advantages(c, check, cuda_path::outcome_advantages(params, in.rewards, in.mask, in.index));
}

/// grpo_passk reads norm_adv_by_std_in_grpo from verl's algorithm config, and needs two responses
/// in every group (verl raises; the kernel would give the lone response an infinite margin).
void passk_case(const GoldenCase& c, CaseCheck& check) {
  const AdvantageInputs in(c);
  in.validate<algo::GRPOPassK>();
  VERL_CHECK_ARG(c.has_arg("config"), "config: verl's grpo_passk needs the algorithm config, got None");
  const algo::detail::PromptGroups groups(in.index);
  for (Index g = 0; g < groups.num_groups(); ++g) {
    const auto rows = groups.rows_of(g);
    VERL_CHECK_ARG(rows.size() >= 2, "index: grpo_passk needs at least 2 responses per prompt group, got {} for uid {}",
                   rows.size(), in.index[static_cast<std::size_t>(rows[0])]);
  }
  kernels::OutcomeParams params;
  params.estimator = kernels::OutcomeEstimator::grpo_passk;
  if (auto v = optional_number(c.args(), "epsilon")) params.epsilon = static_cast<float>(*v);
  params.norm_adv_by_std_in_grpo = optional_bool(c.args().at("config"), "norm_adv_by_std_in_grpo").value_or(true);
  compare_advantages(c, check, cuda_path::outcome_advantages(params, in.rewards, in.mask, in.index));
}

void gae_case(const GoldenCase& c, CaseCheck& check) {
  const AdvantageInputs in(c);
  in.validate<algo::GAE>();
  const double gamma = optional_number(c.args(), "gamma").value_or(1.0);
  const double lam = optional_number(c.args(), "lam").value_or(1.0);
  compare_advantages(c, check, cuda_path::gae(gamma, lam, in.rewards, *in.values, in.mask));
}

/// optimal_token_baseline (E = algo::OptimalTokenBaseline) and its multi-turn form.
template <class E>
void optimal_token_baseline_case(const GoldenCase& c, CaseCheck& check) {
  if (!c.registry_name().empty() && c.registry_name() != E::name)
    check.fail("registry_name", "registry_name '" + c.registry_name() + "' does not match fn " + c.fn());
  const AdvantageInputs in(c);
  const auto optional_matrix = [&](const char* key) {
    return c.has_input(key) ? std::optional<MatrixF>(c.input_tensor(key).matrix<float>()) : std::nullopt;
  };
  const auto old_log_probs = optional_matrix("old_log_probs");
  const auto sum_pi_squared = optional_matrix("sum_pi_squared");
  const auto weights = optional_matrix("rollout_is_weights");
  algo::AdvantageBatch batch{.token_level_rewards = in.rewards, .response_mask = in.mask, .index = in.index};
  if (in.values) batch.values.emplace(*in.values);
  if (in.baselines) batch.reward_baselines.emplace(*in.baselines);
  if (old_log_probs) batch.old_log_probs.emplace(*old_log_probs);
  if (sum_pi_squared) batch.sum_pi_squared.emplace(*sum_pi_squared);
  if (weights) batch.rollout_is_weights.emplace(*weights);
  algo::detail::validate_advantage_batch<E>(batch);  // shapes and presence, as verl raises
  require_binary_mask(in.mask, "response_mask");
  E estimator;
  if (auto v = optional_bool(c.args(), "handle_zero_tail")) estimator.handle_zero_tail = *v;
  if (auto v = optional_number(c.args(), "epsilon")) estimator.epsilon = *v;
  compare_advantages(c, check,
                     cuda_path::optimal_token_baseline(kernels::OptimalTokenBaselineParams::from(estimator), in.rewards,
                                                       in.mask, in.index, *old_log_probs, *sum_pi_squared,
                                                       weights ? &*weights : nullptr));
}

void reinforce_case(const GoldenCase& c, CaseCheck& check) {
  const AdvantageInputs in(c);
  in.validate<algo::ReinforcePlusPlus>();
  VERL_CHECK_ARG(c.has_arg("config"), "config: verl's reinforce_plus_plus needs the algorithm config, got None");
  const double gamma = c.args().at("config").at("gamma").get<double>();
  compare_advantages(c, check, cuda_path::reinforce_plus_plus(gamma, in.rewards, in.mask));
}

void remax_case(const GoldenCase& c, CaseCheck& check) {
  const AdvantageInputs in(c);
  in.validate<algo::ReMax>();
  compare_advantages(c, check, cuda_path::remax(in.rewards, in.mask, *in.baselines));
}

// ---- agg_loss, kl ----------------------------------------------------------------------------------

void agg_loss_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"loss", "grad:loss_mat"}, "cuda");
  const auto mode = algo::parse_loss_agg_mode(c.args().at("loss_agg_mode").get<std::string>());
  algo::GlobalBatchInfo info;
  if (auto v = optional_number(c.args(), "dp_size")) info.dp_size = *v;
  info.batch_num_tokens = optional_number(c.args(), "batch_num_tokens");
  info.global_batch_size = optional_number(c.args(), "global_batch_size");
  info.loss_scale_factor = optional_number(c.args(), "loss_scale_factor");
  const MatrixF loss_mat = c.input_tensor("loss_mat").matrix<float>();
  const MatrixF loss_mask = c.input_tensor("loss_mask").matrix<float>();
  verl::detail::require_same_shape("loss_mask", shape_of(loss_mask), "loss_mat", shape_of(loss_mat));
  (void)algo::detail::count_mask("loss_mask", loss_mask);  // the 0/1 check, as agg_loss raises
  const auto out = cuda_path::agg_loss(loss_mat, loss_mask, mode, info);
  check.scalar("loss", out.loss, c.tolerance());
  check.tensor("grad:loss_mat", out.weights, c.grad_tolerance(), c.grad_tie_indices());
}

void kl_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"kl", "grad:logprob", "grad:ref_logprob"}, "cuda");
  // verl's names, with its errors for the names it knows but rejects ('full', '+' in the forward).
  const auto estimator = algo::make_kl_estimator(c.args().at("kl_penalty").get<std::string>());
  if (c.fn() == "kl_penalty_forward" && algo::name_of(estimator).ends_with('+'))
    verl::detail::throw_not_implemented("kl_penalty_forward: '{}' is a straight-through name", algo::name_of(estimator));
  const auto type = kernels::parse_kl_type(c.args().at("kl_penalty").get<std::string>());
  const MatrixF logprob = c.input_tensor("logprob").matrix<float>();
  const MatrixF ref_logprob = c.input_tensor("ref_logprob").matrix<float>();
  verl::detail::require_same_shape("ref_logprob", shape_of(ref_logprob), "logprob", shape_of(logprob));
  std::optional<MatrixF> cotangent;
  if (c.has_input("cotangent")) {
    cotangent = c.input_tensor("cotangent").matrix<float>();
    verl::detail::require_same_shape("cotangent", shape_of(*cotangent), "logprob", shape_of(logprob));
  }
  const auto out = cuda_path::kl_penalty(type, logprob, ref_logprob, cotangent ? &*cotangent : nullptr);
  check.tensor("kl", out.kl, c.tolerance());
  if (cotangent) {
    const auto ties = c.grad_tie_indices();
    check.tensor("grad:logprob", out.grad_logprob, c.grad_tolerance(), ties);
    check.tensor("grad:ref_logprob", MatrixF(-out.grad_logprob), c.grad_tolerance(), ties);
  } else if (c.outputs().contains("grad:logprob")) {
    check.fail("grad:logprob", "the case has gradients but no cotangent");
  }
}

void compute_rewards_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"rewards"}, "cuda");
  const MatrixF scores = c.input_tensor("token_level_scores").matrix<float>();
  const MatrixF old = c.input_tensor("old_log_prob").matrix<float>();
  const MatrixF ref = c.input_tensor("ref_log_prob").matrix<float>();
  verl::detail::require_same_shape("old_log_prob", shape_of(old), "token_level_scores", shape_of(scores));
  verl::detail::require_same_shape("ref_log_prob", shape_of(ref), "token_level_scores", shape_of(scores));
  check.tensor("rewards", cuda_path::kl_rewards(scores, old, ref, c.args().at("kl_ratio").get<double>()),
               c.tolerance());
}

// ---- policy losses (kernels/policy_loss.cuh) -------------------------------------------------------

/// The loss a case runs: verl's registry (as get_policy_loss_fn), or compute_policy_loss_reinforce.
algo::AnyPolicyLoss policy_loss_of(const GoldenCase& c) {
  if (c.fn() == "compute_policy_loss_reinforce") return algo::ReinforceLoss{};
  return algo::make_policy_loss(policy_loss_mode_of(c), policy_loss_config_from(c));
}

void policy_loss_case(const GoldenCase& c, CaseCheck& check) {
  const bool reinforce = c.fn() == "compute_policy_loss_reinforce";
  const algo::AnyPolicyLoss loss = policy_loss_of(c);
  const MatrixF old = c.input_tensor(reinforce ? "rollout_log_prob" : "old_log_prob").matrix<float>();
  const MatrixF lp = c.input_tensor("log_prob").matrix<float>();
  const MatrixF adv = c.input_tensor("advantages").matrix<float>();
  const MatrixF mask = c.input_tensor("response_mask").matrix<float>();
  std::optional<MatrixF> weights;
  if (c.has_input("rollout_is_weights")) weights = c.input_tensor("rollout_is_weights").matrix<float>();
  algo::PolicyLossBatch batch{old, lp, adv, mask};
  if (weights) batch.rollout_is_weights.emplace(*weights);
  (void)algo::detail::validate_policy_loss_batch(batch);  // shapes and the 0/1 mask, as verl raises
  const json empty = json::object();
  const json& actor = c.has_arg("config") && !c.args().at("config").is_null() ? c.args().at("config") : empty;
  const auto fallback = reinforce ? algo::LossAggMode::seq_mean_token_sum : algo::LossAggMode::token_mean;
  const auto mode = c.has_arg("loss_agg_mode")
                        ? algo::parse_loss_agg_mode(c.args().at("loss_agg_mode").get<std::string>())
                        : fallback;
  const auto result = cuda_path::policy_loss(loss, batch, mode, global_batch_info_from(actor));
  for (auto it = c.outputs().begin(); it != c.outputs().end(); ++it) {
    const std::string& key = it.key();
    if (key == "pg_loss") {
      check.scalar(key, result.pg_loss, c.tolerance());
    } else if (key == "grad:log_prob") {
      check.tensor(key, result.grad_log_prob, c.grad_tolerance(), c.grad_tie_indices());
    } else if (const auto found = result.metrics.find(key); found != result.metrics.end()) {
      check.scalar(key, found->second, c.tolerance());
    } else if (c.output_is_checkable(key)) {
      check.fail(key, "verl reports '" + key + "', the cuda result has no such metric");
    }
  }
  for (const auto& [key, value] : result.metrics)
    if (!c.outputs().contains(key)) check.fail(key, "the cuda result has metric '" + key + "', verl does not report it");
}

/// verl's deprecated compute_policy_loss: the vanilla kernel with keyword clip ranges and verl's
/// unprefixed metric names.
void deprecated_policy_loss_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"pg_loss", "pg_clipfrac", "ppo_kl", "pg_clipfrac_lower", "grad:log_prob"}, "cuda");
  const json& args = c.args();
  const auto cliprange = optional_number(args, "cliprange");
  const auto low = optional_number(args, "cliprange_low") ? optional_number(args, "cliprange_low") : cliprange;
  const auto high = optional_number(args, "cliprange_high") ? optional_number(args, "cliprange_high") : cliprange;
  VERL_CHECK_ARG(low.has_value(), "cliprange_low: expected a number (or cliprange), got neither");
  VERL_CHECK_ARG(high.has_value(), "cliprange_high: expected a number (or cliprange), got neither");
  const algo::VanillaPPO loss{.clip_ratio_low = *low,
                              .clip_ratio_high = *high,
                              .clip_ratio_c = optional_number(args, "clip_ratio_c").value_or(3.0)};
  const MatrixF old = c.input_tensor("old_log_prob").matrix<float>();
  const MatrixF lp = c.input_tensor("log_prob").matrix<float>();
  const MatrixF adv = c.input_tensor("advantages").matrix<float>();
  const MatrixF mask = c.input_tensor("response_mask").matrix<float>();
  const algo::PolicyLossBatch batch{old, lp, adv, mask};
  (void)algo::detail::validate_policy_loss_batch(batch);
  const auto mode = algo::parse_loss_agg_mode(args.value("loss_agg_mode", std::string("token-mean")));
  const auto result = cuda_path::policy_loss(loss, batch, mode, {});
  check.scalar("pg_loss", result.pg_loss, c.tolerance());
  for (const char* key : {"pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"})
    check.scalar(key, result.metrics.at(std::string("actor/") + key), c.tolerance());
  check.tensor("grad:log_prob", result.grad_log_prob, c.grad_tolerance(), c.grad_tie_indices());
}

/// The cases of the losses with a kernel (all of them). A configuration verl rejects is run, so
/// that the case raises as on the CPU.
bool policy_loss_supported(const GoldenCase& c) {
  try {
    return cuda_path::has_policy_loss_kernel(policy_loss_of(c));
  } catch (const std::exception&) {
    return true;
  }
}

// ---- functional: log-probs, entropy, sum p^2 (kernels/logprob_entropy.cuh) ---------------------------

void logprobs_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"logprobs", "grad:logits"}, "cuda");
  const MatrixF logits = c.input_tensor("logits").matrix<float>();
  const std::vector<std::int64_t> labels = c.input_tensor("labels").int64s();
  verl::detail::require_length("labels", static_cast<Index>(labels.size()), logits.rows());
  for (const std::int64_t label : labels)
    VERL_CHECK_ARG(label >= 0 && label < logits.cols(), "labels: expected values in [0, {}), got {}", logits.cols(),
                   label);
  std::optional<VectorF> cotangent;
  if (c.has_input("cotangent")) cotangent = c.input_tensor("cotangent").vector<float>();
  const auto out = cuda_path::logprob_entropy(logits, &labels, cotangent ? &*cotangent : nullptr, nullptr);
  check.tensor("logprobs", out.log_probs, c.tolerance());
  if (cotangent) check.tensor("grad:logits", out.grad_logits, c.grad_tolerance(), c.grad_tie_indices());
}

void entropy_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"entropy", "grad:logits"}, "cuda");
  const MatrixF logits = c.input_tensor("logits").matrix<float>();
  std::optional<VectorF> cotangent;
  if (c.has_input("cotangent")) cotangent = c.input_tensor("cotangent").vector<float>();
  const auto out = cuda_path::logprob_entropy(logits, nullptr, nullptr, cotangent ? &*cotangent : nullptr);
  check.tensor("entropy", out.entropy, c.tolerance());
  if (cotangent) check.tensor("grad:logits", out.grad_logits, c.grad_tolerance(), c.grad_tie_indices());
}

void sum_pi_squared_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"sum_pi_squared"}, "cuda");
  const auto out = cuda_path::logprob_entropy(c.input_tensor("logits").matrix<float>(), nullptr, nullptr, nullptr);
  check.tensor("sum_pi_squared", out.sum_pi_squared, c.tolerance());
}

// ---- functional: masked_sum / masked_mean (kernels/masked_reductions.cuh) -----------------------------

void masked_reduction_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"result", "grad:values"}, "cuda");
  const MatrixF values = c.input_tensor("values").matrix<float>();
  const MatrixF mask = c.input_tensor("mask").matrix<float>();
  verl::detail::require_same_shape("mask", shape_of(mask), "values", shape_of(values));
  algo::detail::require_binary(mask);
  const bool mean = c.fn() == "masked_mean";
  if (!c.has_arg("axis")) {
    const auto out = cuda_path::masked_reduce(values, mask, nullptr, mean, nullptr);
    // verl returns a 0-d float32 tensor; the fixture stores its shortest decimal (as the CPU handler).
    check.scalar("result", std::strtod(fmt::format("{}", static_cast<float>(out.scalar)).c_str(), nullptr),
                 c.tolerance());
    check.tensor("grad:values", out.grad, c.grad_tolerance(), c.grad_tie_indices());
    return;
  }
  const int axis = c.args().at("axis").get<int>();
  (void)algo::detail::reduces_rows(axis);  // verl's axis check
  std::optional<VectorF> cotangent;
  if (c.has_input("cotangent")) cotangent = c.input_tensor("cotangent").vector<float>();
  if (cotangent)
    verl::detail::require_length("cotangent", cotangent->size(),
                                 algo::detail::reduces_rows(axis) ? values.rows() : values.cols());
  const auto out = cuda_path::masked_reduce(values, mask, &axis, mean, cotangent ? &*cotangent : nullptr);
  check.tensor("result", out.along_axis, c.tolerance());
  if (cotangent) check.tensor("grad:values", out.grad, c.grad_tolerance(), c.grad_tie_indices());
}

void masked_var_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"result", "grad:values"}, "cuda");
  const MatrixF values = c.input_tensor("values").matrix<float>();
  const MatrixF mask = c.input_tensor("mask").matrix<float>();
  verl::detail::require_same_shape("mask", shape_of(mask), "values", shape_of(values));
  algo::detail::require_binary(mask);
  const bool unbiased = c.has_arg("unbiased") ? c.args().at("unbiased").get<bool>() : true;
  const auto out = cuda_path::masked_var(values, mask, unbiased);
  if (unbiased) algo::detail::require_unbiased_count(out.count);  // verl raises for fewer than 2
  check.scalar("result", std::strtod(fmt::format("{}", out.var).c_str(), nullptr), c.tolerance());
  check.tensor("grad:values", out.grad, c.grad_tolerance(), c.grad_tie_indices());
}

// ---- value and entropy losses ---------------------------------------------------------------------

void value_loss_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"vf_loss", "vf_clipfrac", "grad:vpreds"}, "cuda");
  const MatrixF vpreds = c.input_tensor("vpreds").matrix<float>();
  const MatrixF returns = c.input_tensor("returns").matrix<float>();
  const MatrixF values = c.input_tensor("values").matrix<float>();
  const MatrixF mask = c.input_tensor("response_mask").matrix<float>();
  verl::detail::require_same_shape("returns", shape_of(returns), "vpreds", shape_of(vpreds));
  verl::detail::require_same_shape("values", shape_of(values), "vpreds", shape_of(vpreds));
  verl::detail::require_same_shape("response_mask", shape_of(mask), "vpreds", shape_of(vpreds));
  (void)algo::detail::count_mask("response_mask", mask);  // the 0/1 check, as the CPU path
  const auto mode = algo::parse_loss_agg_mode(c.args().value("loss_agg_mode", std::string("token-mean")));
  const auto out = cuda_path::value_loss(vpreds, returns, values, mask, c.args().at("cliprange_value").get<double>(), mode);
  check.scalar("vf_loss", out.vf_loss, c.tolerance());
  check.scalar("vf_clipfrac", out.vf_clipfrac, c.tolerance());
  check.tensor("grad:vpreds", out.grad_vpreds, c.grad_tolerance(), c.grad_tie_indices());
}

void entropy_loss_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"entropy_loss", "grad:logits"}, "cuda");
  const MatrixF logits = c.input_tensor("logits").matrix<float>();
  const MatrixF mask = c.input_tensor("response_mask").matrix<float>();
  algo::detail::require_entropy_loss_shapes(logits, mask);
  const auto mode = algo::parse_loss_agg_mode(c.args().value("loss_agg_mode", std::string("token-mean")));
  const auto out = cuda_path::entropy_loss(logits, mask, mode);
  check.scalar("entropy_loss", out.entropy_loss, c.tolerance());
  check.tensor("grad:logits", out.grad_logits, c.grad_tolerance(), c.grad_tie_indices());
}

void gather_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"output"}, "cuda");
  const MatrixF data = c.input_tensor("data").matrix<float>();
  const std::vector<std::int64_t> labels = c.input_tensor("label").int64s();
  verl::detail::require_length("label", static_cast<Index>(labels.size()), data.rows());
  for (const std::int64_t label : labels)  // verl raises; the kernel would leave NaN
    VERL_CHECK_ARG(label >= 0 && label < data.cols(), "label: expected values in [0, {}), got {}", data.cols(), label);
  check.tensor("output", cuda_path::gather_from_labels(data, labels), c.tolerance());
}

void clip_by_value_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"result"}, "cuda");
  const MatrixF x = c.input_tensor("x").matrix<float>();
  const MatrixF lower = c.input_tensor("tensor_min").matrix<float>();
  const MatrixF upper = c.input_tensor("tensor_max").matrix<float>();
  verl::detail::require_same_shape("tensor_min", shape_of(lower), "x", shape_of(x));
  verl::detail::require_same_shape("tensor_max", shape_of(upper), "x", shape_of(x));
  check.tensor("result", cuda_path::clip_by_value(x, lower, upper), c.tolerance());
}

void response_mask_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"response_mask"}, "cuda");
  const RowMatrix<std::int64_t> ids = c.input_tensor("response_id").matrix<std::int64_t>();
  std::vector<std::int64_t> eos;
  const json& arg = c.has_arg("eos_token") ? c.args().at("eos_token") : json(2);  // verl's default
  if (arg.is_array()) {
    for (const auto& e : arg) eos.push_back(e.get<std::int64_t>());
  } else {
    eos.push_back(arg.get<std::int64_t>());
  }
  VERL_CHECK_ARG(!eos.empty(), "eos_token: expected an id or a non-empty list of ids, got []");
  check.tensor("response_mask", cuda_path::response_mask(ids, eos), c.tolerance());
}

void masked_whiten_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"result", "grad:values"}, "cuda");
  const MatrixF values = c.input_tensor("values").matrix<float>();
  const MatrixF mask = c.input_tensor("mask").matrix<float>();
  verl::detail::require_same_shape("mask", shape_of(mask), "values", shape_of(values));
  algo::detail::require_binary(mask);
  algo::detail::require_unbiased_count(static_cast<double>((mask.array() != 0.0f).count()));  // verl raises
  std::optional<MatrixF> cotangent;
  if (c.has_input("cotangent")) cotangent = c.input_tensor("cotangent").matrix<float>();
  const bool shift_mean = shift_mean_of(c.args());
  const auto out = cuda_path::masked_whiten(values, mask, cotangent ? &*cotangent : nullptr, shift_mean);
  check.tensor("result", out.result, c.tolerance());
  if (cotangent) {
    check.tensor("grad:values", out.grad, c.grad_tolerance(), c.grad_tie_indices());
  } else if (c.outputs().contains("grad:values")) {
    check.fail("grad:values", "the case has no cotangent input to compute 'grad:values' from");
  }
}

void register_cuda(CudaSupport& cuda) {
  cuda.unavailable_reason = cuda_path::unavailable_reason;
  HandlerTable& t = cuda.handlers;
  using E = kernels::OutcomeEstimator;
  t["compute_grpo_outcome_advantage"] = [](const GoldenCase& c, CaseCheck& k) { outcome_case<algo::GRPO>(c, k, E::grpo); };
  t["compute_grpo_vectorized_outcome_advantage"] = [](const GoldenCase& c, CaseCheck& k) {
    outcome_case<algo::GRPOVectorized>(c, k, E::grpo_vectorized);
  };
  t["compute_rloo_vectorized_outcome_advantage"] = [](const GoldenCase& c, CaseCheck& k) {
    outcome_case<algo::RLOOVectorized>(c, k, E::rloo_vectorized);
  };
  t["compute_rloo_outcome_advantage"] = [](const GoldenCase& c, CaseCheck& k) { outcome_case<algo::RLOO>(c, k, E::rloo); };
  t["compute_gpg_outcome_advantage"] = [](const GoldenCase& c, CaseCheck& k) { outcome_case<algo::GPG>(c, k, E::gpg); };
  t["compute_opo_outcome_advantage"] = [](const GoldenCase& c, CaseCheck& k) { outcome_case<algo::OPO>(c, k, E::opo); };
  t["compute_reinforce_plus_plus_baseline_outcome_advantage"] = [](const GoldenCase& c, CaseCheck& k) {
    outcome_case<algo::ReinforcePlusPlusBaseline>(c, k, E::reinforce_plus_plus_baseline);
  };
  t["compute_grpo_passk_outcome_advantage"] = passk_case;
  t["compute_gae_advantage_return"] = gae_case;
  t["compute_reinforce_plus_plus_outcome_advantage"] = reinforce_case;
  t["compute_remax_outcome_advantage"] = remax_case;
  t["compute_optimal_token_baseline_advantage"] = optimal_token_baseline_case<algo::OptimalTokenBaseline>;
  t["compute_multi_turn_optimal_token_baseline_advantage"] =
      optimal_token_baseline_case<algo::MultiTurnOptimalTokenBaseline>;
  t["agg_loss"] = agg_loss_case;
  t["kl_penalty"] = kl_case;
  t["kl_penalty_forward"] = kl_case;
  // The straight-through names ('k3+') have no kernel yet; the cases where verl raises for them
  // still run (the kernels' parse refuses them too).
  for (const char* fn : {"kl_penalty", "kl_penalty_forward"})
    cuda.supports[fn] = [](const GoldenCase& c) {
      return c.raises() || !c.args().at("kl_penalty").get<std::string>().ends_with('+');
    };
  t["compute_rewards"] = compute_rewards_case;
  t["masked_whiten"] = masked_whiten_case;
  t["compute_policy_loss"] = deprecated_policy_loss_case;
  t["compute_value_loss"] = value_loss_case;
  // verl 0.9.1's global-batch arguments of compute_value_loss are not passed to the kernel path yet.
  cuda.supports["compute_value_loss"] = [](const GoldenCase& c) {
    for (const char* key : {"dp_size", "batch_num_tokens", "global_batch_size", "loss_scale_factor"})
      if (c.args().contains(key)) return false;
    return true;
  };
  t["compute_entropy_loss"] = entropy_loss_case;
  for (const char* fn : {"compute_policy_loss_vanilla", "compute_policy_loss_gspo", "compute_policy_loss_sapo",
                         "compute_policy_loss_gpg", "compute_policy_loss_clip_cov", "compute_policy_loss_kl_cov",
                         "compute_policy_loss_geo_mean", "compute_policy_loss_cispo",
                         "compute_policy_loss_bypass_mode", "compute_policy_loss_reinforce"}) {
    t[fn] = policy_loss_case;
    cuda.supports[fn] = policy_loss_supported;
  }
  for (const char* fn : {"logprobs_from_logits", "logprobs_from_logits_v2", "logprobs_from_logits_naive"})
    t[fn] = logprobs_case;
  t["entropy_from_logits"] = entropy_case;
  t["entropy_from_logits_with_chunking"] = entropy_case;
  t["calculate_sum_pi_squared_from_logits"] = sum_pi_squared_case;
  t["masked_sum"] = masked_reduction_case;
  t["masked_mean"] = masked_reduction_case;
  t["masked_var"] = masked_var_case;
  t["gather_from_labels"] = gather_case;
  t["clip_by_value"] = clip_by_value_case;
  t["get_response_mask"] = response_mask_case;
}

const CudaRegistrar registrar{register_cuda};

}  // namespace
}  // namespace verl::conformance
