#include "handlers.hpp"

namespace verl::conformance {
namespace {

void register_functional(HandlerTable& table) { (void)table; }

const Registrar registrar{register_functional};

}  // namespace
}  // namespace verl::conformance
