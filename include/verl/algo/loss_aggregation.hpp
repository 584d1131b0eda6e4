// Loss aggregation (verl's agg_loss): the four modes as policy types, the reduction and its
// gradient W = d loss / d loss_mat.
#pragma once

#include <concepts>
#include <optional>
#include <string_view>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

enum class LossAggMode { token_mean, seq_mean_token_sum, seq_mean_token_mean, seq_mean_token_sum_norm };

/// verl's string for the mode ("token-mean", ...).
constexpr std::string_view to_string(LossAggMode mode) {
  switch (mode) {
    case LossAggMode::token_mean: return "token-mean";
    case LossAggMode::seq_mean_token_sum: return "seq-mean-token-sum";
    case LossAggMode::seq_mean_token_mean: return "seq-mean-token-mean";
    case LossAggMode::seq_mean_token_sum_norm: return "seq-mean-token-sum-norm";
  }
  return "?";
}

/// Parses verl's `loss_agg_mode` string; an unknown name is an error (verl raises ValueError).
inline LossAggMode parse_loss_agg_mode(std::string_view name) {
  for (auto mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum, LossAggMode::seq_mean_token_mean,
                    LossAggMode::seq_mean_token_sum_norm}) {
    if (to_string(mode) == name) return mode;
  }
  detail::throw_invalid_argument(
      "loss_agg_mode: expected one of token-mean, seq-mean-token-sum, seq-mean-token-mean, "
      "seq-mean-token-sum-norm, got '{}'",
      name);
}

/// The global-batch arguments verl passes to agg_loss (config.global_batch_info). Unset values
/// fall back to what the local batch gives, as in verl.
struct GlobalBatchInfo {
  double dp_size = 1;
  std::optional<double> batch_num_tokens;   ///< token-mean denominator
  std::optional<double> global_batch_size;  ///< seq-mean-* denominator
  std::optional<double> loss_scale_factor;  ///< seq-mean-token-sum-norm denominator (default T)
};

// ---- policy types -------------------------------------------------------------------------
struct TokenMean {
  static constexpr LossAggMode mode = LossAggMode::token_mean;
  static constexpr std::string_view name = "token-mean";
};
struct SeqMeanTokenSum {
  static constexpr LossAggMode mode = LossAggMode::seq_mean_token_sum;
  static constexpr std::string_view name = "seq-mean-token-sum";
};
struct SeqMeanTokenMean {
  static constexpr LossAggMode mode = LossAggMode::seq_mean_token_mean;
  static constexpr std::string_view name = "seq-mean-token-mean";
};
struct SeqMeanTokenSumNorm {
  static constexpr LossAggMode mode = LossAggMode::seq_mean_token_sum_norm;
  static constexpr std::string_view name = "seq-mean-token-sum-norm";
};

/// A loss-aggregation policy names one of verl's modes at compile time.
template <class A>
concept LossAggregation = requires {
  { A::mode } -> std::convertible_to<LossAggMode>;
  { A::name } -> std::convertible_to<std::string_view>;
};

namespace detail {

/// loss = scale * sum_i row_weight_i * sum_t (m_it * L_it). Shared by the forward pass and the
/// gradient so the two can never disagree. A zero denominator makes `scale` infinite, so an
/// all-masked batch gives 0 * inf = NaN exactly where verl's 0/0 does.
struct AggregationFactors {
  VectorD row_weight;
  double scale = 1;
};

template <class MaskDerived>
AggregationFactors aggregation_factors(const Eigen::MatrixBase<MaskDerived>& mask, LossAggMode mode,
                                       const GlobalBatchInfo& info) {
  const Index rows = mask.rows();
  AggregationFactors f{VectorD::Ones(rows), 1.0};
  VectorD lengths(rows);
  for (Index i = 0; i < rows; ++i) lengths[i] = mask.row(i).template cast<double>().sum();
  // verl divides float32 tensors by Python numbers, i.e. in float32: mirror the rounding.
  const auto float_ratio = [](double num, double den) {
    return static_cast<double>(static_cast<float>(num) / static_cast<float>(den));
  };
  switch (mode) {
    case LossAggMode::token_mean:
      f.scale = float_ratio(info.dp_size, info.batch_num_tokens.value_or(lengths.sum()));
      break;
    case LossAggMode::seq_mean_token_sum:
    case LossAggMode::seq_mean_token_mean: {
      double nonempty = 0;
      for (Index i = 0; i < rows; ++i) {
        if (lengths[i] > 0) {
          nonempty += 1;
          if (mode == LossAggMode::seq_mean_token_mean)
            f.row_weight[i] = 1.0 / static_cast<double>(static_cast<float>(lengths[i]) + 1e-8f);
        } else {
          f.row_weight[i] = 0;  // fully masked rows are dropped from the mean
        }
      }
      f.scale = float_ratio(info.dp_size, info.global_batch_size.value_or(nonempty));
      break;
    }
    case LossAggMode::seq_mean_token_sum_norm:
      // Ignores dp_size and global_batch_size, as verl does.
      f.scale = float_ratio(1.0, info.loss_scale_factor.value_or(static_cast<double>(mask.cols())));
      break;
  }
  return f;
}

}  // namespace detail

/// verl's agg_loss. `loss_mat` values at masked positions never matter (verl zeroes them with
/// where(mask, L, 0) before summing).
template <class LossDerived, class MaskDerived>
float agg_loss(const Eigen::MatrixBase<LossDerived>& loss_mat, const Eigen::MatrixBase<MaskDerived>& loss_mask,
               LossAggMode mode, const GlobalBatchInfo& info = {}) {
  verl::detail::require_same_shape("loss_mask", shape_of(loss_mask), "loss_mat", shape_of(loss_mat));
  const auto factors = detail::aggregation_factors(loss_mask, mode, info);
  double total = 0;
  for (Index i = 0; i < loss_mat.rows(); ++i) {
    if (factors.row_weight[i] == 0) continue;
    double row = 0;
    for (Index j = 0; j < loss_mat.cols(); ++j) {
      const double m = static_cast<double>(loss_mask(i, j));
      if (m != 0) row += static_cast<double>(loss_mat(i, j)) * m;
    }
    total += row * factors.row_weight[i];
  }
  return static_cast<float>(total * factors.scale);
}

/// d agg_loss / d loss_mat: a (B, T) matrix that is exactly 0 at masked positions.
template <class MaskDerived>
MatrixF agg_loss_weights(const Eigen::MatrixBase<MaskDerived>& loss_mask, LossAggMode mode,
                         const GlobalBatchInfo& info = {}) {
  const auto factors = detail::aggregation_factors(loss_mask, mode, info);
  MatrixF w(loss_mask.rows(), loss_mask.cols());
  for (Index i = 0; i < w.rows(); ++i)
    for (Index j = 0; j < w.cols(); ++j) {
      const double m = static_cast<double>(loss_mask(i, j));
      w(i, j) = m != 0 ? static_cast<float>(m * factors.row_weight[i] * factors.scale) : 0.0f;
    }
  return w;
}

/// Compile-time mode: agg_loss<TokenMean>(L, m).
template <LossAggregation Mode, class LossDerived, class MaskDerived>
float agg_loss(const Eigen::MatrixBase<LossDerived>& loss_mat, const Eigen::MatrixBase<MaskDerived>& loss_mask,
               const GlobalBatchInfo& info = {}) {
  return agg_loss(loss_mat, loss_mask, Mode::mode, info);
}

}  // namespace verl::algo
