// Internals shared by the policy losses: float32 element-wise operations with torch's values
// and autograd conventions at ties, verl's masked mean finished in float32, the PPO clipped
// surrogate, and the clip-ratio bounds.
#pragma once

#include <cmath>
#include <limits>

#include "verl/algo/policy_loss.hpp"

namespace verl::algo::detail {

inline constexpr float kLogRatioBound = 20.0f;  ///< verl's ±20 clamp of log-ratios before exp

/// torch.clamp(x, lo, hi): NaN stays NaN.
inline float clamp_value(float x, float lo, float hi) { return std::min(std::max(x, lo), hi); }
/// torch.clamp's backward passes the gradient where lo <= x <= hi, bounds included.
inline float clamp_passes(float x, float lo, float hi) { return (x >= lo && x <= hi) ? 1.0f : 0.0f; }

/// torch.maximum / torch.minimum: NaN wins.
inline float maximum_value(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
  return a < b ? b : a;
}
inline float minimum_value(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
  return b < a ? b : a;
}
/// Share of the incoming gradient torch.maximum(a, b) sends to `a` (to `b`: swap the arguments):
/// all of it, none of it, or half at a tie.
inline float maximum_share(float a, float b) { return a < b ? 0.0f : (a == b ? 0.5f : 1.0f); }
/// Share torch.minimum(a, b) sends to `a` (half at a tie).
inline float minimum_share(float a, float b) { return a > b ? 0.0f : (a == b ? 0.5f : 1.0f); }

/// torch.sign as float.
inline float sign_of(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

/// verl_F.masked_mean finished the way torch does it: a float32 sum divided by
/// float32(count) + 1e-8 (0 for an empty mask).
inline float masked_mean_of(double masked_sum, double count) {
  return static_cast<float>(masked_sum) / (static_cast<float>(count) + 1e-8f);
}

/// PPO's clip range on the ratio. verl computes 1 - clip_ratio_low in Python (double) and
/// torch rounds the bound to float32; branch decisions depend on that rounding.
struct RatioClipRange {
  float low;
  float high;
  static RatioClipRange from_clip_ratios(double clip_ratio_low, double clip_ratio_high) {
    return {static_cast<float>(1.0 - clip_ratio_low), static_cast<float>(1.0 + clip_ratio_high)};
  }
};

/// max(-A * r, -A * clamp(r, low, high)) and its derivative with respect to r, with torch's
/// conventions: clamp passes the gradient at its bounds, maximum splits it at a tie.
struct ClippedSurrogate {
  float unclipped;  ///< pg_losses1 = -A * r
  float clipped;    ///< pg_losses2 = -A * clamp(r, low, high)
  float loss;       ///< max of the two
  float ratio_share;  ///< d loss / d r = -A * ratio_share

  bool clip_active() const { return clipped > unclipped; }  ///< verl's pg_clipfrac indicator
};

inline ClippedSurrogate clipped_surrogate(float neg_advantage, float ratio, RatioClipRange range) {
  ClippedSurrogate s;
  s.unclipped = neg_advantage * ratio;
  s.clipped = neg_advantage * clamp_value(ratio, range.low, range.high);
  s.loss = maximum_value(s.unclipped, s.clipped);
  s.ratio_share = maximum_share(s.unclipped, s.clipped) +
                  maximum_share(s.clipped, s.unclipped) * clamp_passes(ratio, range.low, range.high);
  return s;
}

/// Running masked sums for one metric (numerator in double, as a float32 mean at the end).
struct MaskedMean {
  double sum = 0;
  void add(float value, float mask) {
    if (mask != 0.0f) sum += static_cast<double>(value) * static_cast<double>(mask);
  }
  float mean(double count) const { return masked_mean_of(sum, count); }
};

}  // namespace verl::algo::detail
