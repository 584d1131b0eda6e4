// Loss aggregation (verl 0.9.1's agg_loss): the five modes as policy types, the reduction and its
// gradient W = d loss / d loss_mat.
//
// Every mode is linear in the masked loss: loss = scale * sum_i row_weight_i * sum_t m_it L_it.
// The row weights and the scale depend only on the mask and GlobalBatchInfo. agg_loss makes one
// pass over the batch: each row's mask is counted and checked to be 0/1, then the row is summed
// while it is still in cache. W needs every count before it can be written, so agg_loss_weights
// reads the mask twice.
#pragma once

#include <atomic>
#include <bit>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "verl/algo/detail/parallel_rows.hpp"
#include "verl/algo/detail/simd.hpp"
#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/type_list.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

enum class LossAggMode { token_mean, token_sum, seq_mean_token_sum, seq_mean_token_mean, seq_mean_token_sum_norm };

// ---- policy types -------------------------------------------------------------------------
struct TokenMean {
  static constexpr LossAggMode mode = LossAggMode::token_mean;
  static constexpr std::string_view name = "token-mean";
};
/// verl 0.9.1: the masked sum times dp_size, no denominator.
struct TokenSum {
  static constexpr LossAggMode mode = LossAggMode::token_sum;
  static constexpr std::string_view name = "token-sum";
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

/// verl's loss_agg_mode values, in its order: the one list of the family. to_string and
/// parse_loss_agg_mode derive from it.
using LossAggregations = TypeList<TokenMean, TokenSum, SeqMeanTokenSum, SeqMeanTokenMean, SeqMeanTokenSumNorm>;

/// verl's string for the mode ("token-mean", ...).
constexpr std::string_view to_string(LossAggMode mode) {
  std::string_view name = "?";
  for_each_type(LossAggregations{}, [&](auto type) {
    if (decltype(type)::type::mode == mode) name = decltype(type)::type::name;
  });
  return name;
}

/// Parses verl's `loss_agg_mode` string; an unknown name is an error (verl raises ValueError).
inline LossAggMode parse_loss_agg_mode(std::string_view name) {
  LossAggMode mode{};
  if (visit_by_name(LossAggregations{}, name, [&](auto type) { mode = decltype(type)::type::mode; })) return mode;
  verl::detail::throw_invalid_argument("loss_agg_mode: expected one of {}, got '{}'",
                                       joined_names_of<LossAggregations>(), name);
}

/// The global-batch arguments verl passes to agg_loss (config.global_batch_info). Unset values
/// fall back to what the local batch gives, as in verl, with one data-parallel rank; with
/// dp_size > 1, token-mean needs batch_num_tokens and the seq-mean modes global_batch_size
/// (verl 0.9.1 raises otherwise: a local count would scale each rank's loss differently).
struct GlobalBatchInfo {
  double dp_size = 1;
  std::optional<double> batch_num_tokens;   ///< token-mean denominator
  std::optional<double> global_batch_size;  ///< seq-mean-* denominator
  std::optional<double> loss_scale_factor;  ///< seq-mean-token-sum-norm's extra denominator (default T)
};

/// verl 0.9.1's check of the global numbers a mode needs when dp_size > 1.
inline void require_global_batch_numbers(LossAggMode mode, const GlobalBatchInfo& info) {
  if (!(info.dp_size > 1)) return;
  if (mode == LossAggMode::token_mean)
    VERL_CHECK_ARG(info.batch_num_tokens.has_value(),
                   "global_batch_info.batch_num_tokens: expected the (global) token count with dp_size {} > 1 under "
                   "loss_agg_mode token-mean, got None",
                   info.dp_size);
  if (mode == LossAggMode::seq_mean_token_sum || mode == LossAggMode::seq_mean_token_mean ||
      mode == LossAggMode::seq_mean_token_sum_norm)
    VERL_CHECK_ARG(info.global_batch_size.has_value(),
                   "global_batch_info.global_batch_size: expected the global batch size with dp_size {} > 1 under "
                   "loss_agg_mode {}, got None",
                   info.dp_size, to_string(mode));
}

/// A loss-aggregation policy names one of verl's modes at compile time.
template <class A>
concept LossAggregation = requires {
  { A::mode } -> std::convertible_to<LossAggMode>;
  { A::name } -> std::convertible_to<std::string_view>;
};

namespace detail {

/// A row-major view that binds to any row-major matrix (or block of one) without a copy and
/// evaluates anything else (column-major, expressions) into a temporary once.
template <class Scalar>
using RowMajorView = Eigen::Ref<const RowMatrix<Scalar>, 0, Eigen::OuterStride<>>;

template <class Derived>
RowMajorView<typename Derived::Scalar> row_major_view(const Eigen::MatrixBase<Derived>& m) {
  return RowMajorView<typename Derived::Scalar>(m.derived());
}

/// Lanes for long sums: independent accumulators break the add-latency chain (the compiler may
/// not reassociate one floating-point sum) and let it vectorize; a fixed combination order keeps
/// results deterministic.
inline constexpr Index kSumLanes = 8;

template <class T, std::size_t N>
T combine_lanes(const T (&lanes)[N]) {
  T total = 0;
  for (std::size_t k = 0; k < N; ++k) total += lanes[k];
  return total;
}

/// sum_j term(j) for j < n, accumulated in double over kSumLanes lanes.
template <class Term>
double lane_sum(Index n, const Term& term) {
  double lanes[kSumLanes] = {};
  Index j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes)
    for (Index k = 0; k < kSumLanes; ++k) lanes[k] += static_cast<double>(term(j + k));
  double tail = 0;
  for (; j < n; ++j) tail += static_cast<double>(term(j));
  return combine_lanes(lanes) + tail;
}

/// `value` where `keep`, else +0, without a branch: masks are data-dependent, and a select the
/// compiler turns into a jump mispredicts and blocks vectorization.
template <std::floating_point T>
VERL_FORCE_INLINE T keep_if(bool keep, T value) {
  if constexpr (sizeof(T) == sizeof(std::uint32_t)) {
    return std::bit_cast<T>(std::bit_cast<std::uint32_t>(value) & (0u - static_cast<std::uint32_t>(keep)));
  } else if constexpr (sizeof(T) == sizeof(std::uint64_t)) {
    return std::bit_cast<T>(std::bit_cast<std::uint64_t>(value) & (std::uint64_t{0} - static_cast<std::uint64_t>(keep)));
  } else {
    return keep ? value : T(0);
  }
}

/// Throws for the first element of a mask row that is neither 0 nor 1 (the slow path, taken only
/// after the fast loop found one).
template <class M>
[[noreturn]] void throw_non_binary_mask(std::string_view argument, const M* mask_row, Index cols, Index row) {
  for (Index j = 0; j < cols; ++j) {
    const M v = mask_row[j];
    if (!(v == M(0) || v == M(1)))
      verl::detail::throw_invalid_argument("{}: expected a 0/1 mask, got {} at ({}, {})", argument, static_cast<double>(v), row, j);
  }
  verl::detail::throw_invalid_argument("{}: expected a 0/1 mask (row {})", argument, row);
}

/// A mask row's number of ones, and whether anything else than 0 and 1 appeared.
struct MaskRowCount {
  Index ones;
  bool non_binary;
};

/// The counting loop, kept free of the throw: a call that may throw inside the function stops
/// the compiler from vectorizing (the loop runs about 3x slower).
template <class M>
MaskRowCount count_mask_row_unchecked(const M* mask_row, Index cols) {
  Index ones = 0;
  int non_binary = 0;  // a plain integer reduction, which the vectorizer handles
  for (Index j = 0; j < cols; ++j) {
    const M v = mask_row[j];
    ones += v != M(0);
    non_binary |= !(v == M(0) || v == M(1));
  }
  return {ones, non_binary != 0};
}

/// Number of ones in a mask row; throws unless every element is 0 or 1.
template <class M>
Index count_mask_row(std::string_view argument, const M* mask_row, Index cols, Index row) {
  const auto count = count_mask_row_unchecked(mask_row, cols);
  if (count.non_binary) throw_non_binary_mask(argument, mask_row, cols, row);
  return count.ones;
}

/// What agg_loss needs from the mask: valid-token counts per row, in total, and the number of
/// rows that have any valid token.
struct MaskCounts {
  Vector<Index> row_lengths;
  Index tokens = 0;
  Index nonempty_rows = 0;
  Index cols = 0;

  void finish() {
    tokens = row_lengths.sum();
    nonempty_rows = (row_lengths.array() > 0).count();
  }
};

template <class MaskDerived>
MaskCounts count_mask(std::string_view argument, const Eigen::MatrixBase<MaskDerived>& mask) {
  const auto m = row_major_view(mask);
  MaskCounts counts;
  counts.cols = m.cols();
  counts.row_lengths.resize(m.rows());
  for (Index i = 0; i < m.rows(); ++i)
    counts.row_lengths[i] = count_mask_row(argument, m.data() + i * m.outerStride(), m.cols(), i);
  counts.finish();
  return counts;
}

/// The linear map of one aggregation: loss = scale * sum_i row_weight(i) * (masked row sum i),
/// and W_it = m_it * gradient_weight(i). Arithmetic is in Scalar, in verl's order, because verl
/// divides float32 tensors by Python numbers in float32.
template <class Scalar>
struct Aggregation {
  LossAggMode mode;
  Scalar scale;      ///< dp_size / denominator (inf when the denominator is 0: verl's 0/0 = NaN)
  Scalar token_eps;  ///< 1e-8 in Scalar, for seq-mean-token-mean

  /// seq-mean-* modes drop fully masked rows (verl selects them out with where()), so their
  /// row sums never reach the loss, not even as NaN.
  bool drops(Index row_length) const {
    return row_length == 0 && (mode == LossAggMode::seq_mean_token_sum || mode == LossAggMode::seq_mean_token_mean ||
                               mode == LossAggMode::seq_mean_token_sum_norm);
  }
  /// Per-row factor inside the scale (1, or 1/(len + 1e-8) for seq-mean-token-mean).
  Scalar row_weight(Index row_length) const {
    if (drops(row_length)) return Scalar(0);
    if (mode == LossAggMode::seq_mean_token_mean) return Scalar(1) / (static_cast<Scalar>(row_length) + token_eps);
    return Scalar(1);
  }
  /// d loss / d (m_it L_it) for a valid token of a row with `row_length` valid tokens; autograd
  /// divides the scale by the row length (seq-mean-token-mean), so do we.
  Scalar gradient_weight(Index row_length) const {
    if (drops(row_length)) return Scalar(0);
    if (mode == LossAggMode::seq_mean_token_mean) return scale / (static_cast<Scalar>(row_length) + token_eps);
    return scale;
  }
};

/// token-mean and token-sum sum where(mask, L, 0) (verl's masked_sum), so masked garbage, even inf
/// or NaN, never matters; the seq-mean modes sum L * m, where inf * 0 = NaN, exactly as verl.
constexpr bool selects_valid_tokens(LossAggMode mode) {
  return mode == LossAggMode::token_mean || mode == LossAggMode::token_sum;
}

template <class Scalar>
Aggregation<Scalar> make_aggregation(LossAggMode mode, const MaskCounts& counts, const GlobalBatchInfo& info) {
  const auto ratio = [](double numerator, double denominator) {
    return static_cast<Scalar>(numerator) / static_cast<Scalar>(denominator);
  };
  require_global_batch_numbers(mode, info);
  Aggregation<Scalar> a{mode, Scalar(1), static_cast<Scalar>(1e-8)};
  switch (mode) {
    case LossAggMode::token_mean:
      a.scale = ratio(info.dp_size, info.batch_num_tokens.value_or(static_cast<double>(counts.tokens)));
      break;
    case LossAggMode::token_sum:
      a.scale = static_cast<Scalar>(info.dp_size);
      break;
    case LossAggMode::seq_mean_token_sum:
    case LossAggMode::seq_mean_token_mean:
      a.scale = ratio(info.dp_size, info.global_batch_size.value_or(static_cast<double>(counts.nonempty_rows)));
      break;
    case LossAggMode::seq_mean_token_sum_norm:
      // verl 0.9.1: the seq-mean-token-sum value, divided by loss_scale_factor (default T).
      a.scale = ratio(info.dp_size, info.global_batch_size.value_or(static_cast<double>(counts.nonempty_rows))) /
                static_cast<Scalar>(info.loss_scale_factor.value_or(static_cast<double>(counts.cols)));
      break;
  }
  return a;
}

/// A row's valid-token count and masked loss sum.
struct MaskedRowSum {
  Index length;
  double sum;
  bool non_binary_mask;  ///< the caller throws (a throw in the loop's function blocks vectorization)
};

/// A row's mask count and its masked loss sum in double, as where(mask, L, 0) (kSelectValid,
/// token-mean) or as L * mask (seq-mean modes). Counting and summing are two loops over the row
/// (still in L1 for the second): fused into one, the mixed int/double reductions do not vectorize
/// and the row takes about 3x longer.
template <bool kSelectValid, class L, class M>
MaskedRowSum masked_row_sum(const L* loss_row, const M* mask_row, Index cols) {
  const auto count = count_mask_row_unchecked(mask_row, cols);
  const double sum = lane_sum(cols, [&](Index j) {
    const M m = mask_row[j];
    const L kept = kSelectValid ? keep_if(m != M(0), loss_row[j]) : loss_row[j];
    return static_cast<double>(kept) * static_cast<double>(m);
  });
  return {count.ones, sum, count.non_binary};
}

/// masked_row_sum for float loss and mask, W lanes at a time: the count and the sum in one pass
/// (per-lane int counts and double sums), the row's tail through masked_row_sum itself.
template <int W, bool kSelectValid>
VERL_FORCE_INLINE MaskedRowSum masked_row_sum_simd(const float* __restrict loss_row, const float* __restrict mask_row,
                                                   Index cols) {
  Index j = 0;
  MaskedRowSum result{0, 0.0, false};
#if VERL_HAS_VECTOR_EXTENSIONS
  if constexpr (W > 1) {
    using F = simd::FloatPack<W>;
    using I = simd::IntPack<W>;
    using D = typename simd::HalfDoublePack<W>::Type;
    const F zero{}, one = F{} + 1.0f;
    I ones{}, non_binary{};
    D low{}, high{};
    for (; j + W <= cols; j += W) {
      const F m = simd::load<W>(mask_row + j), l = simd::load<W>(loss_row + j);
      const I valid = m != zero, not_one = m != one;
      ones -= valid;
      non_binary = simd::either<W>(non_binary, simd::both<W>(valid, not_one));
      const F kept = kSelectValid ? simd::keep<W>(valid, l) : l;
      simd::accumulate_double<W>(kept * m, low, high);
    }
    for (int k = 0; k < W; ++k) result.length += ones[k];
    for (int k = 0; k < W / 2; ++k) result.sum += low[k] + high[k];
    result.non_binary_mask = simd::any<W>(non_binary);
  }
#endif
  if (j < cols) {
    const MaskedRowSum tail = masked_row_sum<kSelectValid>(loss_row + j, mask_row + j, cols - j);
    result.length += tail.length;
    result.sum += tail.sum;
    result.non_binary_mask = result.non_binary_mask || tail.non_binary_mask;
  }
  return result;
}

/// Row lengths and masked row sums of a float batch, for agg_loss.
struct MaskedRowSumsJob {
  const RowMajorView<float>* loss;
  const RowMajorView<float>* mask;
  Index* lengths;
  double* sums;
  std::atomic<Index>* first_bad_row;  ///< smallest row whose mask is not 0/1
};

template <int W, bool kSelectValid>
VERL_FORCE_INLINE void masked_row_sums(const MaskedRowSumsJob& job, Index begin, Index end) {
  const Index cols = job.loss->cols();
  Index bad_row = job.loss->rows();
  for (Index i = begin; i < end; ++i) {
    const MaskedRowSum row = masked_row_sum_simd<W, kSelectValid>(job.loss->data() + i * job.loss->outerStride(),
                                                                  job.mask->data() + i * job.mask->outerStride(), cols);
    job.lengths[i] = row.length;
    job.sums[i] = row.sum;
    if (row.non_binary_mask && bad_row == job.loss->rows()) bad_row = i;
  }
  Index seen = job.first_bad_row->load();
  while (bad_row < seen && !job.first_bad_row->compare_exchange_weak(seen, bad_row)) {
  }
}
template <bool kSelectValid>
void masked_row_sums_baseline(const MaskedRowSumsJob& job, Index begin, Index end) {
  masked_row_sums<simd::baseline_width, kSelectValid>(job, begin, end);
}
#if VERL_HAS_X86_DISPATCH
template <bool kSelectValid>
VERL_TARGET_AVX2 void masked_row_sums_avx2(const MaskedRowSumsJob& job, Index begin, Index end) {
  masked_row_sums<8, kSelectValid>(job, begin, end);
}
template <bool kSelectValid>
VERL_TARGET_AVX512 void masked_row_sums_avx512(const MaskedRowSumsJob& job, Index begin, Index end) {
  masked_row_sums<16, kSelectValid>(job, begin, end);
}
#endif

/// Fills counts.row_lengths and row_sums for a float batch: vector rows split over threads;
/// throws for the first row (in row order) whose mask is not 0/1.
inline void float_masked_row_sums(const RowMajorView<float>& loss, const RowMajorView<float>& mask, bool select_valid,
                                  MaskCounts& counts, VectorD& row_sums) {
  std::atomic<Index> first_bad{loss.rows()};
  const MaskedRowSumsJob job{&loss, &mask, counts.row_lengths.data(), row_sums.data(), &first_bad};
  using Kernel = void (*)(const MaskedRowSumsJob&, Index, Index);
  Kernel kernel = select_valid ? &masked_row_sums_baseline<true> : &masked_row_sums_baseline<false>;
#if VERL_HAS_X86_DISPATCH
  const SimdLevel level = simd::best_level();
  if (level == SimdLevel::avx2) kernel = select_valid ? &masked_row_sums_avx2<true> : &masked_row_sums_avx2<false>;
  if (level == SimdLevel::avx512)
    kernel = select_valid ? &masked_row_sums_avx512<true> : &masked_row_sums_avx512<false>;
#endif
  parallel_rows(loss.rows(), loss.cols(), [&](Index b, Index e) { kernel(job, b, e); });
  const Index bad = first_bad.load();
  if (bad < loss.rows()) throw_non_binary_mask("loss_mask", mask.data() + bad * mask.outerStride(), loss.cols(), bad);
}

template <class Derived>
constexpr void require_floating_loss() {
  VERL_STATIC_ASSERT(std::is_floating_point_v<typename Derived::Scalar>, AGG_LOSS_NEEDS_A_FLOATING_POINT_LOSS_MATRIX);
}

}  // namespace detail

/// verl's agg_loss, in the loss matrix's precision (float for MatrixF). `loss_mat` values at
/// masked positions are ignored under token-mean (verl's where(mask, L, 0)); under the seq-mean
/// modes only a non-finite value there matters (inf * 0 = NaN, as in verl). An all-masked batch
/// gives NaN under token-mean and seq-mean-*, as verl's 0/0 does, and 0 under token-sum.
template <class LossDerived, class MaskDerived>
typename LossDerived::Scalar agg_loss(const Eigen::MatrixBase<LossDerived>& loss_mat,
                                      const Eigen::MatrixBase<MaskDerived>& loss_mask, LossAggMode mode,
                                      const GlobalBatchInfo& info = {}) {
  detail::require_floating_loss<LossDerived>();
  using Scalar = typename LossDerived::Scalar;
  verl::detail::require_same_shape("loss_mask", shape_of(loss_mask), "loss_mat", shape_of(loss_mat));
  const auto loss = detail::row_major_view(loss_mat);
  const auto mask = detail::row_major_view(loss_mask);
  detail::MaskCounts counts;
  counts.cols = loss.cols();
  counts.row_lengths.resize(loss.rows());
  VectorD row_sums(loss.rows());
  if constexpr (std::is_same_v<Scalar, float> && std::is_same_v<typename MaskDerived::Scalar, float>) {
    detail::float_masked_row_sums(loss, mask, detail::selects_valid_tokens(mode), counts, row_sums);
  } else {
    for (Index i = 0; i < loss.rows(); ++i) {
      const auto* loss_row = loss.data() + i * loss.outerStride();
      const auto* mask_row = mask.data() + i * mask.outerStride();
      const auto row = detail::selects_valid_tokens(mode)
                           ? detail::masked_row_sum<true>(loss_row, mask_row, loss.cols())
                           : detail::masked_row_sum<false>(loss_row, mask_row, loss.cols());
      if (row.non_binary_mask) detail::throw_non_binary_mask("loss_mask", mask_row, loss.cols(), i);
      counts.row_lengths[i] = row.length;
      row_sums[i] = row.sum;
    }
  }
  counts.finish();

  const auto aggregation = detail::make_aggregation<Scalar>(mode, counts, info);
  double total = 0;
  for (Index i = 0; i < loss.rows(); ++i) {
    const Index length = counts.row_lengths[i];
    if (aggregation.drops(length)) continue;
    total += row_sums[i] * static_cast<double>(aggregation.row_weight(length));
  }
  return static_cast<Scalar>(total * static_cast<double>(aggregation.scale));
}

/// d agg_loss / d loss_mat: (B, T), exactly 0 at masked positions. Scalar is the result's type.
template <class Scalar = float, class MaskDerived>
RowMatrix<Scalar> agg_loss_weights(const Eigen::MatrixBase<MaskDerived>& loss_mask, LossAggMode mode,
                                   const GlobalBatchInfo& info = {}) {
  VERL_STATIC_ASSERT(std::is_floating_point_v<Scalar>, AGG_LOSS_NEEDS_A_FLOATING_POINT_LOSS_MATRIX);
  using M = typename MaskDerived::Scalar;
  const auto counts = detail::count_mask("loss_mask", loss_mask);
  const auto aggregation = detail::make_aggregation<Scalar>(mode, counts, info);
  const auto mask = detail::row_major_view(loss_mask);
  RowMatrix<Scalar> w(mask.rows(), mask.cols());
  for (Index i = 0; i < mask.rows(); ++i) {
    const Scalar weight = aggregation.gradient_weight(counts.row_lengths[i]);
    const M* m = mask.data() + i * mask.outerStride();
    Scalar* out = w.data() + i * w.cols();
    for (Index j = 0; j < mask.cols(); ++j) out[j] = detail::keep_if(m[j] != M(0), weight);
  }
  return w;
}

/// Compile-time mode: agg_loss<TokenMean>(L, m).
template <LossAggregation Mode, class LossDerived, class MaskDerived>
typename LossDerived::Scalar agg_loss(const Eigen::MatrixBase<LossDerived>& loss_mat,
                                      const Eigen::MatrixBase<MaskDerived>& loss_mask,
                                      const GlobalBatchInfo& info = {}) {
  return agg_loss(loss_mat, loss_mask, Mode::mode, info);
}

/// Compile-time mode: agg_loss_weights<SeqMeanTokenMean>(m).
template <LossAggregation Mode, class Scalar = float, class MaskDerived>
RowMatrix<Scalar> agg_loss_weights(const Eigen::MatrixBase<MaskDerived>& loss_mask, const GlobalBatchInfo& info = {}) {
  return agg_loss_weights<Scalar>(loss_mask, Mode::mode, info);
}

}  // namespace verl::algo
