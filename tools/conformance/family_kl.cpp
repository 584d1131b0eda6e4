// Conformance handlers for kl.json (compute_rewards, kl_penalty, kl_penalty_forward) and
// kl_controller.json (FixedKLController, AdaptiveKLController, get_kl_controller).
#include <fmt/format.h>

#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "handlers.hpp"
#include "verl/algo/kl/controller.hpp"
#include "verl/algo/kl/penalty.hpp"
#include "verl/algo/kl/registry.hpp"
#include "verl/algo/kl/rewards.hpp"

namespace verl::conformance {
namespace {

/// Every output of a case must be compared; an output this handler does not know is a failure.
void compute_rewards_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"rewards"});
  const auto rewards = algo::compute_rewards(c.input_tensor("token_level_scores").matrix<float>(),
                                             c.input_tensor("old_log_prob").matrix<float>(),
                                             c.input_tensor("ref_log_prob").matrix<float>(),
                                             c.args().at("kl_ratio").get<double>());
  check.tensor("rewards", rewards, c.tolerance());
}

/// kl_penalty and kl_penalty_forward: the estimate and, with a cotangent, its VJP.
void kl_penalty_case(const GoldenCase& c, CaseCheck& check, bool forward_only) {
  require_known_outputs(c, check, {"kl", "grad:logprob", "grad:ref_logprob"});
  const auto estimator = algo::make_kl_estimator(c.args().at("kl_penalty").get<std::string>());
  const MatrixF logprob = c.input_tensor("logprob").matrix<float>();
  const MatrixF ref_logprob = c.input_tensor("ref_logprob").matrix<float>();
  const MatrixF kl = forward_only ? algo::kl_penalty_forward(logprob, ref_logprob, estimator)
                                  : algo::kl_penalty(logprob, ref_logprob, estimator);
  check.tensor("kl", kl, c.tolerance());
  if (c.has_input("cotangent")) {
    const auto grad =
        algo::kl_penalty_backward(logprob, ref_logprob, c.input_tensor("cotangent").matrix<float>(), estimator);
    const auto ties = c.grad_tie_indices();
    check.tensor("grad:logprob", grad.logprob, c.grad_tolerance(), ties);
    check.tensor("grad:ref_logprob", grad.ref_logprob, c.grad_tolerance(), ties);
  } else if (c.outputs().contains("grad:logprob")) {
    check.fail("grad:logprob", "the case has gradients but no cotangent");
  }
}

/// Runs the controller through the case's (current_kl, n_steps) updates and compares each value.
template <class Controller>
void run_controller(const GoldenCase& c, CaseCheck& check, Controller& controller) {
  const auto tol = c.tolerance();
  check.scalar("initial_value", algo::kl_coefficient(controller), tol);
  const auto& kls = c.inputs().at("current_kl");
  const auto& steps = c.inputs().at("n_steps");
  if (kls.size() != steps.size()) {
    check.fail("values", "current_kl and n_steps differ in length");
    return;
  }
  std::vector<double> values;
  for (std::size_t i = 0; i < kls.size(); ++i) {
    algo::update_kl_controller(controller, kls[i].get<double>(), steps[i].get<std::int64_t>());
    values.push_back(algo::kl_coefficient(controller));
  }
  check.number_list("values", values, tol);
}

void adaptive_controller_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"initial_value", "values"});
  algo::AnyKLController controller = algo::AdaptiveKLController(
      c.args().at("init_kl_coef").get<double>(), c.args().at("target_kl").get<double>(),
      c.args().at("horizon").get<double>());
  run_controller(c, check, controller);
}

void fixed_controller_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"initial_value", "values"});
  algo::AnyKLController controller = algo::FixedKLController(c.args().at("kl_coef").get<double>());
  run_controller(c, check, controller);
}

void get_kl_controller_case(const GoldenCase& c, CaseCheck& check) {
  require_known_outputs(c, check, {"initial_value", "values", "controller_class"});
  const auto& cfg = c.args().at("kl_ctrl");
  algo::KLControlConfig config;
  config.type = cfg.at("type").get<std::string>();
  if (auto v = optional_number(cfg, "kl_coef")) config.kl_coef = *v;
  if (auto v = optional_number(cfg, "target_kl")) config.target_kl = *v;
  if (auto v = optional_number(cfg, "horizon")) config.horizon = *v;
  auto controller = algo::get_kl_controller(config);
  check.exact("controller_class", std::string(algo::class_name_of(controller)));
  run_controller(c, check, controller);
}

void register_kl(HandlerTable& table) {
  table["compute_rewards"] = compute_rewards_case;
  table["kl_penalty"] = [](const GoldenCase& c, CaseCheck& check) { kl_penalty_case(c, check, false); };
  table["kl_penalty_forward"] = [](const GoldenCase& c, CaseCheck& check) { kl_penalty_case(c, check, true); };
  table["AdaptiveKLController"] = adaptive_controller_case;
  table["FixedKLController"] = fixed_controller_case;
  table["get_kl_controller"] = get_kl_controller_case;
}

const Registrar registrar{register_kl};

}  // namespace
}  // namespace verl::conformance
