#include "handlers.hpp"

namespace verl::conformance {
namespace {

void register_advantages(HandlerTable& table) { (void)table; }

const Registrar registrar{register_advantages};

}  // namespace
}  // namespace verl::conformance
