// Rotary position embedding (RoPE) as Hugging Face's Llama / Qwen2 apply it: the head dimension
// is split in halves (x1, x2) and rotated as (x1 cos - x2 sin, x2 cos + x1 sin) by the angle
// position * inv_freq[i], with inv_freq[i] = 1 / theta^(2i / head_dim) (rescaled by the
// "linear", "llama3" and "yarn" rope_scaling types; yarn also scales cos and sin).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <type_traits>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/model/hf_config.hpp"

namespace verl::model {

template <class Scalar>
class RotaryEmbedding {
 public:
  RotaryEmbedding() = default;

  /// The frequencies of `config` (head_dim, rope_theta, rope_scaling). The float model computes
  /// them in float32 exactly like transformers, the double model in double.
  explicit RotaryEmbedding(const HfModelConfig& config) : head_dim_(config.head_dim) {
    VERL_CHECK_ARG(head_dim_ % 2 == 0, "head_dim: expected an even number for rotary embeddings, got {}", head_dim_);
    const Index half = head_dim_ / 2;
    inv_freq_.resize(half);
    const auto base = static_cast<Scalar>(config.rope_theta);
    for (Index i = 0; i < half; ++i) {
      const Scalar exponent = static_cast<Scalar>(2 * i) / static_cast<Scalar>(head_dim_);
      inv_freq_[i] = Scalar(1) / std::pow(base, exponent);
    }
    if (!config.rope_scaling) return;
    const RopeScaling& scaling = *config.rope_scaling;
    const auto factor = static_cast<Scalar>(scaling.factor);
    if (scaling.rope_type == "linear") {
      inv_freq_ /= factor;
    } else if (scaling.rope_type == "llama3") {
      const auto old_context = static_cast<Scalar>(
          scaling.original_max_position_embeddings.value_or(config.max_position_embeddings));
      const auto low = static_cast<Scalar>(scaling.low_freq_factor);
      const auto high = static_cast<Scalar>(scaling.high_freq_factor);
      const Scalar low_freq_wavelen = old_context / low, high_freq_wavelen = old_context / high;
      for (Index i = 0; i < half; ++i) {
        const Scalar inv = inv_freq_[i];
        const Scalar wavelen = static_cast<Scalar>(2 * std::numbers::pi) / inv;
        if (wavelen > low_freq_wavelen) {
          inv_freq_[i] = inv / factor;
        } else if (!(wavelen < high_freq_wavelen)) {
          // Between the two wavelengths: interpolate between scaled and unscaled.
          const Scalar smooth = (old_context / wavelen - low) / (high - low);
          inv_freq_[i] = (Scalar(1) - smooth) * inv / factor + smooth * inv;
        }
      }
    } else if (scaling.rope_type == "yarn") {
      apply_yarn(config, scaling);
    } else {
      ::verl::detail::throw_not_implemented(
          "rope_scaling: rope_type '{}' is not implemented (supported: default, linear, llama3, yarn)",
          scaling.rope_type);
    }
  }

  [[nodiscard]] Index head_dim() const { return head_dim_; }
  [[nodiscard]] const Vector<Scalar>& inv_freq() const { return inv_freq_; }
  /// The factor cos and sin are multiplied by (YaRN's attention_factor; 1 otherwise).
  [[nodiscard]] Scalar attention_scaling() const { return attention_scaling_; }

  /// cos and sin of position * inv_freq, (positions, head_dim / 2) each.
  void tables(std::span<const std::int64_t> positions, RowMatrix<Scalar>& cos, RowMatrix<Scalar>& sin) const {
    const auto n = static_cast<Index>(positions.size());
    const Index half = head_dim_ / 2;
    cos.resize(n, half);
    sin.resize(n, half);
    for (Index t = 0; t < n; ++t) {
      const auto position = static_cast<Scalar>(positions[static_cast<std::size_t>(t)]);
      for (Index i = 0; i < half; ++i) {
        const Scalar angle = position * inv_freq_[i];
        // Evaluated in double and rounded once: within half an ulp of torch's float cos/sin.
        cos(t, i) = static_cast<Scalar>(std::cos(static_cast<double>(angle)));
        sin(t, i) = static_cast<Scalar>(std::sin(static_cast<double>(angle)));
        if (attention_scaling_ != Scalar(1)) {
          cos(t, i) *= attention_scaling_;
          sin(t, i) *= attention_scaling_;
        }
      }
    }
  }

  /// Rotates `heads` heads of each row of x (rows, heads * head_dim) in place; `inverse` applies
  /// the transposed rotation (the backward pass of the forward rotation).
  static void apply(Scalar* x, Index x_stride, Index rows, Index heads, Index head_dim, const RowMatrix<Scalar>& cos,
                    const RowMatrix<Scalar>& sin, bool inverse = false) {
    apply_rows(x, x_stride, 0, rows, heads, head_dim, cos, sin, inverse);
  }
  /// Rows [begin, end) of apply (row blocks may run on separate threads).
  static void apply_rows(Scalar* x, Index x_stride, Index begin, Index end, Index heads, Index head_dim,
                         const RowMatrix<Scalar>& cos, const RowMatrix<Scalar>& sin, bool inverse = false) {
    const Index half = head_dim / 2;
    for (Index t = begin; t < end; ++t) {
      const Scalar* c = cos.data() + t * half;
      const Scalar* s = sin.data() + t * half;
      for (Index h = 0; h < heads; ++h) {
        Scalar* x1 = x + t * x_stride + h * head_dim;
        Scalar* x2 = x1 + half;
        if (!inverse) {
          for (Index i = 0; i < half; ++i) {
            const Scalar a = x1[i], b = x2[i];
            x1[i] = a * c[i] - b * s[i];
            x2[i] = b * c[i] + a * s[i];
          }
        } else {
          for (Index i = 0; i < half; ++i) {
            const Scalar a = x1[i], b = x2[i];
            x1[i] = a * c[i] + b * s[i];
            x2[i] = b * c[i] - a * s[i];
          }
        }
      }
    }
  }

 private:
  /// YaRN (transformers' _compute_yarn_parameters): frequencies blend from extrapolated (fast
  /// rotations, the unscaled inv_freq) to interpolated (slow rotations, inv_freq / factor) over a
  /// linear ramp between the dimensions that turn beta_fast and beta_slow times over the original
  /// context; cos and sin are scaled by the attention factor 0.1 ln(factor) + 1 (or its mscale form).
  void apply_yarn(const HfModelConfig& config, const RopeScaling& scaling) {
    const double factor = scaling.factor, base = config.rope_theta;
    const double dim = static_cast<double>(head_dim_);
    const auto original = static_cast<double>(
        scaling.original_max_position_embeddings.value_or(config.max_position_embeddings));
    VERL_CHECK_ARG(factor >= 1.0, "rope_scaling.factor: expected a number >= 1 for yarn, got {}", factor);
    const auto mscale_of = [](double scale, double mscale) {
      return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
    };
    double attention = 0;
    if (scaling.attention_factor) {
      attention = *scaling.attention_factor;
    } else if (scaling.mscale.value_or(0) != 0 && scaling.mscale_all_dim.value_or(0) != 0) {
      attention = mscale_of(factor, *scaling.mscale) / mscale_of(factor, *scaling.mscale_all_dim);
    } else {
      attention = mscale_of(factor, 1.0);
    }
    const double beta_fast = scaling.beta_fast.value_or(0) != 0 ? *scaling.beta_fast : 32.0;
    const double beta_slow = scaling.beta_slow.value_or(0) != 0 ? *scaling.beta_slow : 1.0;
    const auto correction_dim = [&](double rotations) {
      return dim * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
    };
    double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
    if (scaling.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;  // as transformers does, to avoid dividing by zero
    // The ramp and the blend in float32 arithmetic for the float model, as torch computes them.
    const auto low_s = static_cast<Scalar>(low), span = static_cast<Scalar>(high - low);
    const auto factor_s = static_cast<Scalar>(factor), base_s = static_cast<Scalar>(base);
    for (Index i = 0; i < inv_freq_.size(); ++i) {
      const Scalar position_frequency = std::pow(base_s, static_cast<Scalar>(2 * i) / static_cast<Scalar>(head_dim_));
      const Scalar extrapolated = Scalar(1) / position_frequency;
      const Scalar interpolated = Scalar(1) / (factor_s * position_frequency);
      const Scalar ramp = std::clamp((static_cast<Scalar>(i) - low_s) / span, Scalar(0), Scalar(1));
      const Scalar extrapolation_share = Scalar(1) - ramp;
      inv_freq_[i] = interpolated * (Scalar(1) - extrapolation_share) + extrapolated * extrapolation_share;
    }
    attention_scaling_ = static_cast<Scalar>(attention);
  }

  Index head_dim_ = 0;
  Vector<Scalar> inv_freq_;
  Scalar attention_scaling_ = Scalar(1);
};

}  // namespace verl::model
