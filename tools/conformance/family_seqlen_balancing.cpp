#include "handlers.hpp"

namespace verl::conformance {

void register_seqlen_balancing(HandlerTable& table) { (void)table; }

}  // namespace verl::conformance
