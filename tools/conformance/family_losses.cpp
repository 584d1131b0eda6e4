// Conformance handlers for agg_loss.json (agg_loss) and value_loss.json (compute_value_loss).
#include <fmt/format.h>

#include <initializer_list>
#include <string>

#include "handlers.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/value_loss.hpp"

namespace verl::conformance {
namespace {

/// Every output of a case must be compared; an output this handler does not know is a failure.
algo::GlobalBatchInfo global_batch_info(const json& args) {
  algo::GlobalBatchInfo info;
  if (auto v = optional_number(args, "dp_size")) info.dp_size = *v;
  info.batch_num_tokens = optional_number(args, "batch_num_tokens");
  info.global_batch_size = optional_number(args, "global_batch_size");
  info.loss_scale_factor = optional_number(args, "loss_scale_factor");
  return info;
}

void agg_loss_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"loss", "grad:loss_mat"});
  const auto mode = algo::parse_loss_agg_mode(c.args().at("loss_agg_mode").get<std::string>());
  const auto info = global_batch_info(c.args());
  const MatrixF loss_mat = c.input_tensor("loss_mat").matrix<float>();
  const MatrixF loss_mask = c.input_tensor("loss_mask").matrix<float>();
  check.scalar("loss", algo::agg_loss(loss_mat, loss_mask, mode, info), c.tolerance());
  check.tensor("grad:loss_mat", algo::agg_loss_weights(loss_mask, mode, info), c.grad_tolerance(),
               c.grad_tie_indices());
}

void value_loss_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"vf_loss", "vf_clipfrac", "grad:vpreds"});
  const auto result = algo::compute_value_loss(
      c.input_tensor("vpreds").matrix<float>(), c.input_tensor("returns").matrix<float>(),
      c.input_tensor("values").matrix<float>(), c.input_tensor("response_mask").matrix<float>(),
      c.args().at("cliprange_value").get<double>(), c.args().value("loss_agg_mode", std::string("token-mean")),
      global_batch_info(c.args()));
  check.scalar("vf_loss", result.vf_loss, c.tolerance());
  check.scalar("vf_clipfrac", result.vf_clipfrac, c.tolerance());
  check.tensor("grad:vpreds", result.grad_vpreds, c.grad_tolerance(), c.grad_tie_indices());
}

void register_losses(HandlerTable& table) {
  table["agg_loss"] = agg_loss_case;
  table["compute_value_loss"] = value_loss_case;
}

const Registrar registrar{register_losses};

}  // namespace
}  // namespace verl::conformance
