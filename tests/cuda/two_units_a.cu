// First of two translation units that both use every kernel header (see two_units_uses.hpp).
#include "two_units_uses.hpp"

int two_units_a(bool launch) { return use_every_kernel_header<1>(launch); }
