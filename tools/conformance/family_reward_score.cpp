#include "handlers.hpp"

namespace verl::conformance {
namespace {

void register_reward_score(HandlerTable& table) { (void)table; }

const Registrar registrar{register_reward_score};

}  // namespace
}  // namespace verl::conformance
