#include "handlers.hpp"

namespace verl::conformance {
namespace {

void register_losses(HandlerTable& table) { (void)table; }

const Registrar registrar{register_losses};

}  // namespace
}  // namespace verl::conformance
