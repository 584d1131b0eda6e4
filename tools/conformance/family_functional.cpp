// Conformance handlers for verl/utils/torch_functional.py (functional.json) and
// compute_entropy_loss (value_loss.json). Thin: parse the case, call verl-cpp, compare.
#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "handlers.hpp"
#include "verl/algo/entropy_loss.hpp"
#include "verl/algo/functional.hpp"
#include "verl/optim/schedules.hpp"

namespace verl::conformance {
namespace {

using testing::HostTensor;

/// The fixtures write a 0-d float32 result as its shortest round-trip decimal, and CaseCheck
/// reads plain numbers as doubles; a float32 result encoded the same way compares exactly
/// (tolerance-0 cases need that). Tensors are read back as float32 by CaseCheck itself.
double as_fixture_decimal(float v) { return std::strtod(fmt::format("{}", v).c_str(), nullptr); }

/// Records which output keys a handler compared, so that a key the handler forgot is reported as
/// a failure instead of passing silently.
class Outputs {
 public:
  Outputs(const GoldenCase& c, CaseCheck& check) : case_(c), check_(check) {}
  Outputs(const Outputs&) = delete;
  Outputs& operator=(const Outputs&) = delete;

  template <class Derived>
  void tensor(const std::string& key, const Eigen::DenseBase<Derived>& got) {
    compared_.insert(key);
    if (key.starts_with("grad:"))
      check_.tensor(key, got, case_.grad_tolerance(), case_.grad_tie_indices());
    else
      check_.tensor(key, got, case_.tolerance());
  }
  /// A 0-d float32 result (verl returns a tensor; the fixture stores a number).
  void scalar(const std::string& key, double got) {
    compared_.insert(key);
    check_.scalar(key, as_fixture_decimal(static_cast<float>(got)), case_.tolerance());
  }
  /// A plain JSON list of doubles (a Python list of floats in verl).
  void number_list(const std::string& key, const std::vector<double>& got) {
    compared_.insert(key);
    check_.number_list(key, got, case_.tolerance());
  }
  ~Outputs() {
    try {
      for (auto it = case_.outputs().begin(); it != case_.outputs().end(); ++it)
        if (!compared_.count(it.key()))
          check_.fail(it.key(), fmt::format("{}: output not compared by the handler", it.key()));
    } catch (...) {  // never throw from a destructor (it also runs while a raises-case unwinds)
    }
  }

 private:
  const GoldenCase& case_;
  CaseCheck& check_;
  std::set<std::string> compared_;
};

/// Logits of any rank folded to (rows, V), with the matching labels / cotangent flattened.
MatrixF logits_of(const GoldenCase& c, const char* key = "logits") { return c.input_tensor(key).matrix<float>(); }
std::vector<std::int64_t> labels_of(const GoldenCase& c, const char* key = "labels") {
  return c.input_tensor(key).int64s();
}
VectorF cotangent_of(const GoldenCase& c) { return c.input_tensor("cotangent").vector<float>(); }

void logprobs(const GoldenCase& c, CaseCheck& check) {
  const MatrixF logits = logits_of(c);
  const std::vector<std::int64_t> labels = labels_of(c);
  Outputs out(c, check);
  const std::string fn = c.fn();
  const VectorF lp = fn == "logprobs_from_logits_v2"      ? algo::logprobs_from_logits_v2(logits, labels)
                     : fn == "logprobs_from_logits_naive" ? algo::logprobs_from_logits_naive(logits, labels)
                                                          : algo::logprobs_from_logits(logits, labels);
  out.tensor("logprobs", lp);
  if (c.has_input("cotangent")) out.tensor("grad:logits", algo::logprobs_from_logits_backward(logits, labels, cotangent_of(c)));
}

void entropy(const GoldenCase& c, CaseCheck& check) {
  const MatrixF logits = logits_of(c);
  Outputs out(c, check);
  if (c.fn() == "entropy_from_logits_with_chunking") {
    const Index chunk = c.has_arg("chunk_size") ? c.args().at("chunk_size").get<Index>() : 2048;
    out.tensor("entropy", algo::entropy_from_logits_with_chunking(logits, chunk));
  } else {
    out.tensor("entropy", algo::entropy_from_logits(logits));
  }
  if (c.has_input("cotangent")) out.tensor("grad:logits", algo::entropy_from_logits_backward(logits, cotangent_of(c)));
}

void sum_pi_squared(const GoldenCase& c, CaseCheck& check) {
  Outputs out(c, check);
  out.tensor("sum_pi_squared", algo::calculate_sum_pi_squared_from_logits(logits_of(c)));
}

void gather(const GoldenCase& c, CaseCheck& check) {
  Outputs out(c, check);
  out.tensor("output", algo::gather_from_labels(logits_of(c, "data"), labels_of(c, "label")));
}

/// masked_sum / masked_mean with verl's `axis` (null: a scalar over everything).
void masked_reduction(const GoldenCase& c, CaseCheck& check) {
  const MatrixF values = c.input_tensor("values").matrix<float>();
  const MatrixF mask = c.input_tensor("mask").matrix<float>();
  const bool mean = c.fn() == "masked_mean";
  Outputs out(c, check);
  if (!c.has_arg("axis")) {
    out.scalar("result", mean ? algo::masked_mean(values, mask) : algo::masked_sum(values, mask));
    out.tensor("grad:values", mean ? algo::masked_mean_backward(mask) : algo::masked_sum_backward(mask));
    return;
  }
  const int axis = c.args().at("axis").get<int>();
  out.tensor("result", mean ? algo::masked_mean(values, mask, axis) : algo::masked_sum(values, mask, axis));
  if (c.has_input("cotangent")) {
    const VectorF cot = cotangent_of(c);
    out.tensor("grad:values", mean ? algo::masked_mean_backward(mask, cot, axis) : algo::masked_sum_backward(mask, cot, axis));
  }
}

void masked_var(const GoldenCase& c, CaseCheck& check) {
  const MatrixF values = c.input_tensor("values").matrix<float>();
  const MatrixF mask = c.input_tensor("mask").matrix<float>();
  const bool unbiased = c.has_arg("unbiased") ? c.args().at("unbiased").get<bool>() : true;
  Outputs out(c, check);
  out.scalar("result", algo::masked_var(values, mask, unbiased));
  out.tensor("grad:values", algo::masked_var_backward(values, mask, unbiased));
}

void masked_whiten(const GoldenCase& c, CaseCheck& check) {
  const MatrixF values = c.input_tensor("values").matrix<float>();
  const MatrixF mask = c.input_tensor("mask").matrix<float>();
  const bool shift_mean = shift_mean_of(c.args());
  Outputs out(c, check);
  out.tensor("result", algo::masked_whiten(values, mask, shift_mean));
  if (c.has_input("cotangent"))
    out.tensor("grad:values",
               algo::masked_whiten_backward(values, mask, c.input_tensor("cotangent").matrix<float>(), shift_mean));
}

void clip_by_value(const GoldenCase& c, CaseCheck& check) {
  Outputs out(c, check);
  out.tensor("result", algo::clip_by_value(c.input_tensor("x").matrix<float>(), c.input_tensor("tensor_min").matrix<float>(),
                                           c.input_tensor("tensor_max").matrix<float>()));
}

void response_mask(const GoldenCase& c, CaseCheck& check) {
  const RowMatrix<std::int64_t> ids = c.input_tensor("response_id").matrix<std::int64_t>();
  std::vector<std::int64_t> eos;
  const json& arg = c.has_arg("eos_token") ? c.args().at("eos_token") : json(2);
  if (arg.is_array())
    for (const auto& e : arg) eos.push_back(e.get<std::int64_t>());
  else
    eos.push_back(arg.get<std::int64_t>());
  Outputs out(c, check);
  out.tensor("response_mask", algo::get_response_mask(ids, eos));
}

void entropy_loss(const GoldenCase& c, CaseCheck& check) {
  const MatrixF logits = logits_of(c);
  const MatrixF mask = c.input_tensor("response_mask").matrix<float>();
  const std::string mode = c.has_arg("loss_agg_mode") ? c.args().at("loss_agg_mode").get<std::string>() : "token-mean";
  const algo::EntropyLoss loss = algo::compute_entropy_loss(logits, mask, algo::parse_loss_agg_mode(mode));
  Outputs out(c, check);
  out.scalar("entropy_loss", loss.entropy_loss);
  out.tensor("grad:logits", loss.grad_logits);
}

/// verl's get_cosine_schedule_with_warmup: the LambdaLR multiplier at each of `current_step`.
void cosine_schedule(const GoldenCase& c, CaseCheck& check) {
  const json& args = c.args();
  optim::CosineWithWarmup schedule(args.at("num_warmup_steps").get<std::int64_t>(),
                                   args.at("num_training_steps").get<std::int64_t>(),
                                   optional_number(args, "min_lr_ratio").value_or(0.0),
                                   optional_number(args, "num_cycles").value_or(0.5),
                                   optional_number(args, "init_lr_ratio").value_or(0.0));
  if (args.contains("zero_indexed_step")) schedule.zero_indexed_step = args.at("zero_indexed_step").get<bool>();
  std::vector<double> multipliers;
  for (const json& step : c.inputs().at("current_step")) multipliers.push_back(schedule.multiplier(step.get<std::int64_t>()));
  Outputs out(c, check);
  out.number_list("lr_lambda", multipliers);
}

void register_functional(HandlerTable& table) {
  for (const char* fn : {"logprobs_from_logits", "logprobs_from_logits_v2", "logprobs_from_logits_naive"}) table[fn] = logprobs;
  table["entropy_from_logits"] = entropy;
  table["entropy_from_logits_with_chunking"] = entropy;
  table["calculate_sum_pi_squared_from_logits"] = sum_pi_squared;
  table["gather_from_labels"] = gather;
  table["masked_sum"] = masked_reduction;
  table["masked_mean"] = masked_reduction;
  table["masked_var"] = masked_var;
  table["masked_whiten"] = masked_whiten;
  table["clip_by_value"] = clip_by_value;
  table["get_response_mask"] = response_mask;
  table["compute_entropy_loss"] = entropy_loss;
  table["get_cosine_schedule_with_warmup"] = cosine_schedule;
}

const Registrar registrar{register_functional};

}  // namespace
}  // namespace verl::conformance
