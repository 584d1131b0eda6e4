#include "handlers.hpp"

namespace verl::conformance {

void register_kl(HandlerTable& table) { (void)table; }

}  // namespace verl::conformance
