// Float32 element-wise operations with torch's values and autograd conventions (NaN handling,
// gradient shares at ties, clamp bounds), written branch-free, and row sums of terms.
//
// Every select here is a bit-mask select with both operands computed (never a ?: on floats): a ?:
// may be lowered to a branch, and under the default -ftrapping-math the compiler then refuses to
// if-convert it, which keeps the token loops that use these helpers from vectorising.
#pragma once

#include <bit>
#include <cstdint>

#include "verl/algo/loss_aggregation.hpp"
#include "verl/config.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo::detail {

// ---- branch-free float operations ----------------------------------------------------------------

/// condition ? if_true : if_false, with both operands computed unconditionally.
VERL_FORCE_INLINE float select(bool condition, float if_true, float if_false) {
  const std::uint32_t keep = 0u - static_cast<std::uint32_t>(condition);
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(if_true) & keep) |
                              (std::bit_cast<std::uint32_t>(if_false) & ~keep));
}
VERL_FORCE_INLINE float indicator(bool condition) { return select(condition, 1.0f, 0.0f); }
VERL_FORCE_INLINE bool is_nan(float x) { return x != x; }

/// torch.clamp(x, lo, hi): NaN stays NaN.
VERL_FORCE_INLINE float clamp_value(float x, float lo, float hi) {
  const float above = select(x < lo, lo, x);
  return select(above > hi, hi, above);
}
/// torch.clamp's backward passes the gradient where lo <= x <= hi, bounds included.
VERL_FORCE_INLINE float clamp_passes(float x, float lo, float hi) { return indicator((x >= lo) & (x <= hi)); }

/// torch.maximum / torch.minimum: NaN wins.
VERL_FORCE_INLINE float maximum_value(float a, float b) { return select((a < b) | is_nan(b), b, a); }
VERL_FORCE_INLINE float minimum_value(float a, float b) { return select((b < a) | is_nan(b), b, a); }
/// Share of the incoming gradient torch.maximum(a, b) sends to `a` (to `b`: swap the arguments):
/// all of it, none of it, or half at a tie.
VERL_FORCE_INLINE float maximum_share(float a, float b) { return select(a < b, 0.0f, select(a == b, 0.5f, 1.0f)); }
/// Share torch.minimum(a, b) sends to `a` (half at a tie).
VERL_FORCE_INLINE float minimum_share(float a, float b) { return select(a > b, 0.0f, select(a == b, 0.5f, 1.0f)); }

/// torch.sign as float.
VERL_FORCE_INLINE float sign_of(float x) { return select(x > 0.0f, 1.0f, select(x < 0.0f, -1.0f, 0.0f)); }

/// Sum of a row of float terms in double over loss_aggregation's fixed lanes (deterministic,
/// vectorisable).
inline double sum_row_terms(const float* terms, Index n) {
  return lane_sum(n, [terms](Index j) { return terms[j]; });
}

}  // namespace verl::algo::detail
