// Host side of masked_reductions.cuh: the loss-aggregation arithmetic shared by the kernels and the
// host (verl's agg_loss, as verl::algo::loss_aggregation computes it, in float32 where verl divides
// float32 tensors by Python numbers), and the CPU references (verl::algo).
#pragma once

#include <cstdint>
#include <vector>

#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/masked_stats.hpp"
#include "verl/kernels/detail/host_device.hpp"

namespace verl::kernels {

using algo::GlobalBatchInfo;
using algo::LossAggMode;

/// GlobalBatchInfo flattened for a kernel argument (no std::optional on the device).
struct AggregationParams {
  LossAggMode mode = LossAggMode::token_mean;
  double dp_size = 1;
  double batch_num_tokens = 0, global_batch_size = 0, loss_scale_factor = 0;
  bool has_batch_num_tokens = false, has_global_batch_size = false, has_loss_scale_factor = false;

  static AggregationParams from(LossAggMode mode, const GlobalBatchInfo& info) {
    algo::require_global_batch_numbers(mode, info);
    AggregationParams p;
    p.mode = mode;
    p.dp_size = info.dp_size;
    p.has_batch_num_tokens = info.batch_num_tokens.has_value();
    p.batch_num_tokens = info.batch_num_tokens.value_or(0);
    p.has_global_batch_size = info.global_batch_size.has_value();
    p.global_batch_size = info.global_batch_size.value_or(0);
    p.has_loss_scale_factor = info.loss_scale_factor.has_value();
    p.loss_scale_factor = info.loss_scale_factor.value_or(0);
    return p;
  }
};

/// The aggregation of one batch, as algo::detail::Aggregation<float>: loss = scale * sum_i
/// row_weight(len_i) * rowsum_i, W = m * gradient_weight(len_i).
struct Aggregation {
  LossAggMode mode;
  float scale;

  VERL_KERNELS_HD bool drops(std::int64_t length) const {
    return length == 0 && (mode == LossAggMode::seq_mean_token_sum || mode == LossAggMode::seq_mean_token_mean ||
                           mode == LossAggMode::seq_mean_token_sum_norm);
  }
  VERL_KERNELS_HD float row_weight(std::int64_t length) const {
    if (drops(length)) return 0.0f;
    if (mode == LossAggMode::seq_mean_token_mean) return 1.0f / (static_cast<float>(length) + 1e-8f);
    return 1.0f;
  }
  VERL_KERNELS_HD float gradient_weight(std::int64_t length) const {
    if (drops(length)) return 0.0f;
    if (mode == LossAggMode::seq_mean_token_mean) return scale / (static_cast<float>(length) + 1e-8f);
    return scale;
  }
  /// token-mean and token-sum sum where(mask, L, 0); the seq-mean modes L * m (inf * 0 = NaN, as verl).
  VERL_KERNELS_HD bool selects_valid() const {
    return mode == LossAggMode::token_mean || mode == LossAggMode::token_sum;
  }
};

/// make_aggregation from the batch's counts: valid tokens, rows with any valid token, columns.
VERL_KERNELS_HD Aggregation make_aggregation(const AggregationParams& p, std::int64_t tokens, std::int64_t nonempty_rows,
                                             std::int64_t cols) {
  Aggregation a{p.mode, 1.0f};
  switch (p.mode) {
    case LossAggMode::token_mean:
      a.scale = static_cast<float>(p.dp_size) /
                static_cast<float>(p.has_batch_num_tokens ? p.batch_num_tokens : static_cast<double>(tokens));
      break;
    case LossAggMode::token_sum:
      a.scale = static_cast<float>(p.dp_size);
      break;
    case LossAggMode::seq_mean_token_sum:
    case LossAggMode::seq_mean_token_mean:
      a.scale = static_cast<float>(p.dp_size) /
                static_cast<float>(p.has_global_batch_size ? p.global_batch_size : static_cast<double>(nonempty_rows));
      break;
    case LossAggMode::seq_mean_token_sum_norm:
      a.scale = static_cast<float>(p.dp_size) /
                static_cast<float>(p.has_global_batch_size ? p.global_batch_size : static_cast<double>(nonempty_rows)) /
                static_cast<float>(p.has_loss_scale_factor ? p.loss_scale_factor : static_cast<double>(cols));
      break;
  }
  return a;
}

namespace detail {
/// The mask's per-row lengths and batch counts on the host (the sequential runs of the loss
/// kernels' algorithms).
struct HostMaskCounts {
  std::vector<std::int64_t> lengths;
  std::int64_t tokens = 0, nonempty_rows = 0;

  HostMaskCounts(const float* mask, std::int64_t rows, std::int64_t cols) : lengths(static_cast<std::size_t>(rows), 0) {
    for (std::int64_t r = 0; r < rows; ++r) {
      auto& length = lengths[static_cast<std::size_t>(r)];
      for (std::int64_t t = 0; t < cols; ++t) length += mask[r * cols + t] != 0.0f;
      tokens += length;
      nonempty_rows += length > 0;
    }
  }
  Aggregation aggregation(LossAggMode mode, const GlobalBatchInfo& info, std::int64_t cols) const {
    return make_aggregation(AggregationParams::from(mode, info), tokens, nonempty_rows, cols);
  }
};
}  // namespace detail

/// verl's masked_mean finished in float32: sum / (count + 1e-8).
VERL_KERNELS_HD float masked_mean_of(double sum, double count) {
  return static_cast<float>(sum) / (static_cast<float>(count) + 1e-8f);
}

}  // namespace verl::kernels
