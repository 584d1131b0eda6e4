// Conformance handlers for policy_loss.json: every registered policy loss (through the registry,
// as verl's get_policy_loss_fn), the deprecated compute_policy_loss and
// compute_policy_loss_reinforce. Handlers only translate the case; the numerics live in
// verl/algo/policy_losses.hpp.
#include <optional>
#include <string>
#include <string_view>

#include "handlers.hpp"
#include "policy_loss_config.hpp"
#include "verl/algo/policy_losses.hpp"

namespace verl::conformance {
namespace {

using namespace verl::algo;

/// The case's tensors, owned here so that the batch's views stay valid.
struct CaseTensors {
  MatrixF old_log_prob, log_prob, advantages, response_mask;
  std::optional<MatrixF> rollout_is_weights;

  CaseTensors(const GoldenCase& c, const char* old_key)
      : old_log_prob(c.input_tensor(old_key).matrix<float>()),
        log_prob(c.input_tensor("log_prob").matrix<float>()),
        advantages(c.input_tensor("advantages").matrix<float>()),
        response_mask(c.input_tensor("response_mask").matrix<float>()) {
    if (c.has_input("rollout_is_weights")) rollout_is_weights = c.input_tensor("rollout_is_weights").matrix<float>();
  }
  PolicyLossBatch batch() const {
    PolicyLossBatch b{old_log_prob, log_prob, advantages, response_mask};
    if (rollout_is_weights) b.rollout_is_weights.emplace(*rollout_is_weights);
    return b;
  }
};

/// Compares every output of the case: the loss, each metric by verl's key, the gradient (ties
/// skipped), and flags metrics verl does not report.
void compare(const GoldenCase& c, CaseCheck& check, float loss, const std::string& loss_key, const Metrics& metrics,
             const MatrixF& grad_log_prob) {
  const auto tolerance = c.tolerance();
  for (auto it = c.outputs().begin(); it != c.outputs().end(); ++it) {
    const std::string& key = it.key();
    if (key == loss_key) {
      check.scalar(key, loss, tolerance);
    } else if (key == "grad:log_prob") {
      check.tensor(key, grad_log_prob, c.grad_tolerance(), c.grad_tie_indices());
    } else if (const auto found = metrics.find(key); found != metrics.end()) {
      check.scalar(key, found->second, tolerance);
    } else if (c.output_is_checkable(key)) {
      check.fail(key, "verl reports '" + key + "', the C++ result has no such metric");
    }
  }
  for (const auto& [key, value] : metrics)
    if (!c.outputs().contains(key)) check.fail(key, "the C++ result has metric '" + key + "', verl does not report it");
}

LossAggMode loss_agg_mode_of(const GoldenCase& c, LossAggMode fallback) {
  return c.has_arg("loss_agg_mode") ? parse_loss_agg_mode(c.args().at("loss_agg_mode").get<std::string>()) : fallback;
}

void run_registered(const GoldenCase& c, CaseCheck& check) {
  const AnyPolicyLoss loss = make_policy_loss(policy_loss_mode_of(c), policy_loss_config_from(c));
  const CaseTensors tensors(c, "old_log_prob");
  const json& actor = c.args().at("config");
  const AggregationContext context{loss_agg_mode_of(c, LossAggMode::token_mean), global_batch_info_from(actor)};
  const PolicyLossResult result = compute_policy_loss(loss, tensors.batch(), context);
  compare(c, check, result.pg_loss, "pg_loss", result.metrics, result.grad_log_prob);
}

void run_reinforce(const GoldenCase& c, CaseCheck& check) {
  const CaseTensors tensors(c, "rollout_log_prob");
  const json empty = json::object();
  const json& actor = c.has_arg("config") ? c.args().at("config") : empty;
  const AggregationContext context{loss_agg_mode_of(c, LossAggMode::seq_mean_token_sum), global_batch_info_from(actor)};
  const PolicyLossResult result = compute_policy_loss(ReinforceLoss{}, tensors.batch(), context);
  compare(c, check, result.pg_loss, "pg_loss", result.metrics, result.grad_log_prob);
}

void run_deprecated(const GoldenCase& c, CaseCheck& check) {
  const CaseTensors tensors(c, "old_log_prob");
  const json& args = c.args();
  const double clip_ratio_c = optional_number(args, "clip_ratio_c").value_or(3.0);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const auto result = compute_policy_loss_deprecated(
      tensors.old_log_prob, tensors.log_prob, tensors.advantages, tensors.response_mask,
      optional_number(args, "cliprange"), optional_number(args, "cliprange_low"),
      optional_number(args, "cliprange_high"), clip_ratio_c, loss_agg_mode_of(c, LossAggMode::token_mean));
#pragma GCC diagnostic pop
  const Metrics metrics{{"pg_clipfrac", result.pg_clipfrac},
                        {"ppo_kl", result.ppo_kl},
                        {"pg_clipfrac_lower", result.pg_clipfrac_lower}};
  compare(c, check, result.pg_loss, "pg_loss", metrics, result.grad_log_prob);
}

void register_policy_loss(HandlerTable& table) {
  for (const char* fn : {"compute_policy_loss_vanilla", "compute_policy_loss_gspo", "compute_policy_loss_sapo",
                         "compute_policy_loss_gpg", "compute_policy_loss_clip_cov", "compute_policy_loss_kl_cov",
                         "compute_policy_loss_geo_mean", "compute_policy_loss_cispo",
                         "compute_policy_loss_bypass_mode", "compute_policy_loss_dppo_tv", "compute_policy_loss_dppo_kl",
                         "compute_policy_loss_dro"})
    table[fn] = run_registered;
  table["compute_policy_loss_reinforce"] = run_reinforce;
  table["compute_policy_loss"] = run_deprecated;
}

const Registrar registrar{register_policy_loss};

}  // namespace
}  // namespace verl::conformance
