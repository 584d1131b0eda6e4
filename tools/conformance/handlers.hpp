// The conformance runner's dispatch table: verl function name -> a handler that runs the C++
// implementation on a golden case and records comparisons in a CaseCheck. A handler throws
// (any std::exception) where verl raises.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "verl/testing/golden.hpp"

namespace verl::conformance {

using testing::CaseCheck;
using testing::GoldenCase;
using testing::json;

using Handler = std::function<void(const GoldenCase&, CaseCheck&)>;
using HandlerTable = std::map<std::string, Handler, std::less<>>;

// One registration function per family file (family_<name>.cpp).
void register_advantages(HandlerTable& table);
void register_policy_loss(HandlerTable& table);
void register_kl(HandlerTable& table);             // kl.json and kl_controller.json
void register_losses(HandlerTable& table);         // agg_loss.json and value_loss.json
void register_functional(HandlerTable& table);
void register_seqlen_balancing(HandlerTable& table);
void register_reward_score(HandlerTable& table);

inline HandlerTable all_handlers() {
  HandlerTable t;
  register_advantages(t);
  register_policy_loss(t);
  register_kl(t);
  register_losses(t);
  register_functional(t);
  register_seqlen_balancing(t);
  register_reward_score(t);
  return t;
}

/// Optional JSON number (null -> nullopt).
inline std::optional<double> optional_number(const json& object, const char* key) {
  if (!object.contains(key) || object.at(key).is_null()) return std::nullopt;
  return object.at(key).get<double>();
}

}  // namespace verl::conformance
