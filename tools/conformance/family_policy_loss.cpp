#include "handlers.hpp"

namespace verl::conformance {
namespace {

void register_policy_loss(HandlerTable& table) { (void)table; }

const Registrar registrar{register_policy_loss};

}  // namespace
}  // namespace verl::conformance
