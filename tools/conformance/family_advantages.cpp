#include "handlers.hpp"

namespace verl::conformance {

void register_advantages(HandlerTable& table) { (void)table; }

}  // namespace verl::conformance
