#include "handlers.hpp"

namespace verl::conformance {

void register_reward_score(HandlerTable& table) { (void)table; }

}  // namespace verl::conformance
