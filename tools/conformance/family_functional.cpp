#include "handlers.hpp"

namespace verl::conformance {

void register_functional(HandlerTable& table) { (void)table; }

}  // namespace verl::conformance
