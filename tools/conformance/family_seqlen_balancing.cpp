#include "handlers.hpp"

namespace verl::conformance {
namespace {

void register_seqlen_balancing(HandlerTable& table) { (void)table; }

const Registrar registrar{register_seqlen_balancing};

}  // namespace
}  // namespace verl::conformance
