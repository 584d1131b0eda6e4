// The SIMD helpers of the cpu module under the names algo's kernels use: verl::algo::SimdLevel is
// part of algo's public options (it selects the vector width of its row loops).
#pragma once

#include "verl/cpu/vector_math.hpp"

namespace verl::algo {
using cpu::SimdLevel;
namespace detail {
namespace simd = cpu::simd;
}  // namespace detail
}  // namespace verl::algo
