// The precision of the weights a decode step multiplies (float32, or bfloat16 products with float32
// accumulation): the cpu module's GEMM family implements it; the model's options name it here.
#pragma once

#include "verl/cpu/decode_precision.hpp"

namespace verl::model {
using cpu::DecodePrecision;
using cpu::parse_decode_precision;
}  // namespace verl::model
