// Rotary position embedding (RoPE) as Hugging Face's Llama / Qwen2 apply it: the head dimension
// is split in halves (x1, x2) and rotated as (x1 cos - x2 sin, x2 cos + x1 sin) by the angle
// position * inv_freq[i], with inv_freq[i] = 1 / theta^(2i / head_dim) (rescaled by the
// "linear" and "llama3" rope_scaling types).
#pragma once

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
    } else {
      ::verl::detail::throw_not_implemented(
          "rope_scaling: rope_type '{}' is not implemented (supported: default, linear, llama3)", scaling.rope_type);
    }
  }

  [[nodiscard]] Index head_dim() const { return head_dim_; }
  [[nodiscard]] const Vector<Scalar>& inv_freq() const { return inv_freq_; }

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
      }
    }
  }

  /// Rotates `heads` heads of each row of x (rows, heads * head_dim) in place; `inverse` applies
  /// the transposed rotation (the backward pass of the forward rotation).
  static void apply(Scalar* x, Index x_stride, Index rows, Index heads, Index head_dim, const RowMatrix<Scalar>& cos,
                    const RowMatrix<Scalar>& sin, bool inverse = false) {
    const Index half = head_dim / 2;
    for (Index t = 0; t < rows; ++t) {
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
  Index head_dim_ = 0;
  Vector<Scalar> inv_freq_;
};

}  // namespace verl::model
