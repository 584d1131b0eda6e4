#include "handlers.hpp"

namespace verl::conformance {

void register_policy_loss(HandlerTable& table) { (void)table; }

}  // namespace verl::conformance
