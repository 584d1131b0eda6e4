#include "handlers.hpp"

namespace verl::conformance {
namespace {

void register_kl(HandlerTable& table) { (void)table; }

const Registrar registrar{register_kl};

}  // namespace
}  // namespace verl::conformance
