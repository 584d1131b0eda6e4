// verl's KL penalty types (kl_penalty / kl_penalty_forward in core_algos.py) as KLEstimator
// policies, and the element-wise batch functions: the estimate and its vector-Jacobian product.
//
//   kl / k1          lp - ref
//   abs              |lp - ref|
//   mse / k2         0.5 (lp - ref)^2
//   low_var_kl / k3  clamp(exp(x) - x - 1, -10, 10) with x = clamp(ref - lp, -20, 20)
//   <name>+          the value of <name>, the gradient of k2 (verl's straight-through names)
//
// The string names ("kl", "k3", ...) are resolved by verl/algo/kl_registry.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "verl/algo/detail/output_buffers.hpp"
#include "verl/algo/detail/parallel_rows.hpp"
#include "verl/algo/detail/simd.hpp"
#include "verl/algo/kl/estimator.hpp"
#include "verl/algo/loss_aggregation.hpp"  // detail::RowMajorView
#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

/// k1: the log-ratio itself; unbiased for KL but with high variance (and possibly negative).
struct KL {
  static constexpr std::string_view name = "kl";
  static constexpr KLFormula formula = KLFormula::kl;
  template <std::floating_point T>
  T value(T logprob, T ref_logprob) const {
    return logprob - ref_logprob;
  }
  template <std::floating_point T>
  T grad_logprob(T /*logprob*/, T /*ref_logprob*/, T cotangent) const {
    return cotangent;
  }
};
/// verl's second name for KL.
struct K1 : KL {
  static constexpr std::string_view name = "k1";
};

/// |lp - ref|; torch's |x|' is 0 at 0.
struct Abs {
  static constexpr std::string_view name = "abs";
  static constexpr KLFormula formula = KLFormula::abs;
  template <std::floating_point T>
  T value(T logprob, T ref_logprob) const {
    return std::abs(logprob - ref_logprob);
  }
  template <std::floating_point T>
  T grad_logprob(T logprob, T ref_logprob, T cotangent) const {
    const T diff = logprob - ref_logprob;
    const T sign = diff > T(0) ? T(1) : (diff < T(0) ? T(-1) : T(0));
    return cotangent * sign;
  }
};

/// k2: 0.5 (lp - ref)^2, low variance and biased; its gradient is the one of the true KL.
struct MSE {
  static constexpr std::string_view name = "mse";
  static constexpr KLFormula formula = KLFormula::mse;
  template <std::floating_point T>
  T value(T logprob, T ref_logprob) const {
    const T diff = logprob - ref_logprob;
    return T(0.5) * (diff * diff);
  }
  template <std::floating_point T>
  T grad_logprob(T logprob, T ref_logprob, T cotangent) const {
    // Autograd order: (cot * 0.5) * (2 * diff).
    return (cotangent * T(0.5)) * (T(2) * (logprob - ref_logprob));
  }
};
/// verl's second name for MSE.
struct K2 : MSE {
  static constexpr std::string_view name = "k2";
};

/// k3: exp(x) - x - 1 with x = ref - lp, unbiased and always >= 0. Both clamps are verl's
/// numerical guards: the log-ratio is clamped before exp, the estimate after.
struct LowVarKL {
  static constexpr std::string_view name = "low_var_kl";
  static constexpr KLFormula formula = KLFormula::low_var_kl;
  double log_ratio_bound = 20;  ///< x = clamp(ref - lp, -bound, bound)
  double kl_bound = 10;         ///< result = clamp(k, -bound, bound)

  template <std::floating_point T>
  T value(T logprob, T ref_logprob) const {
    const T x = clamped_log_ratio(logprob, ref_logprob);
    const T k = (std::exp(x) - x) - T(1);
    const T bound = static_cast<T>(kl_bound);
    return std::clamp(k, -bound, bound);
  }

  /// Zero where either clamp is strictly active (torch's clamp passes the gradient at its bounds).
  template <std::floating_point T>
  T grad_logprob(T logprob, T ref_logprob, T cotangent) const {
    const T raw = ref_logprob - logprob;
    const T log_bound = static_cast<T>(log_ratio_bound);
    if (!(raw >= -log_bound && raw <= log_bound)) return T(0);
    const T ratio = std::exp(raw);
    const T k = (ratio - raw) - T(1);
    const T bound = static_cast<T>(kl_bound);
    if (!(k >= -bound && k <= bound)) return T(0);
    // d k / d x = exp(x) - 1, accumulated by autograd as cot * exp(x) + (-cot); d x / d lp = -1.
    return -(cotangent * ratio - cotangent);
  }

 private:
  template <std::floating_point T>
  T clamped_log_ratio(T logprob, T ref_logprob) const {
    const T bound = static_cast<T>(log_ratio_bound);
    return std::clamp(ref_logprob - logprob, -bound, bound);
  }
};
/// verl's second name for LowVarKL.
struct K3 : LowVarKL {
  static constexpr std::string_view name = "k3";
};

namespace detail {
/// E::name followed by '+', as constant storage for a string_view.
template <class E>
inline constexpr auto straight_through_name = [] {
  std::array<char, E::name.size() + 1> text{};
  for (std::size_t i = 0; i < E::name.size(); ++i) text[i] = E::name[i];
  text[E::name.size()] = '+';
  return text;
}();
}  // namespace detail

/// verl's straight-through variant of a KL type, named with a trailing '+' ("k3+", "low_var_kl+"):
/// the value of E and the gradient of k2, as verl computes it,
///   k2 - k2.detach() + E.detach(),  k2 = 0.5 (lp - ref)^2,
/// whose forward is E's estimate exactly and whose gradient is (lp - ref) times the cotangent:
/// E's estimate without its bias in the gradient (Schulman's k3 has a gradient whose expectation
/// is not the KL's; k2's is).
template <class E>
struct StraightThrough : E {
  static constexpr std::string_view name{detail::straight_through_name<E>.data(),
                                         detail::straight_through_name<E>.size()};
  /// Forward formula of E; the kernels take the gradient from here.
  static constexpr bool straight_through = true;
  template <std::floating_point T>
  T grad_logprob(T logprob, T ref_logprob, T cotangent) const {
    return MSE{}.grad_logprob(logprob, ref_logprob, cotangent);
  }
};

static_assert(KLEstimator<KL> && KLEstimator<K1> && KLEstimator<Abs> && KLEstimator<MSE> && KLEstimator<K2> &&
              KLEstimator<LowVarKL> && KLEstimator<K3> && KLEstimator<StraightThrough<K3>>);
static_assert(StraightThrough<LowVarKL>::name == "low_var_kl+");

/// d(sum(cotangent * kl)) / d logprob and / d ref_logprob.
template <class Scalar>
struct KLPenaltyGrad {
  RowMatrix<Scalar> logprob;
  RowMatrix<Scalar> ref_logprob;
};

namespace detail {

template <class LD, class RD>
constexpr void require_log_prob_types() {
  VERL_STATIC_ASSERT(std::is_floating_point_v<typename LD::Scalar>, KL_PENALTY_NEEDS_FLOATING_POINT_LOG_PROBS);
  VERL_STATIC_ASSERT((std::is_same_v<typename LD::Scalar, typename RD::Scalar>),
                     KL_PENALTY_LOG_PROBS_MUST_SHARE_ONE_SCALAR_TYPE);
}


/// How far ahead (in floats) low_var_kl's vector loop prefetches its two inputs: the loop has
/// enough arithmetic between loads that the hardware prefetcher alone leaves one core short of
/// the bandwidth it gets from a plain copy (measured at 16384 x 1024, one thread: 28 to 33 ms without,
/// 21.5 to 24 ms with 1 to 2 KiB ahead; a copy-like pass takes 20 ms).
inline constexpr Index kLowVarKLPrefetchAhead = 512;

/// low_var_kl's forward on W lanes at a time: std::clamp(x), exp (simd::exp_bounded, within about
/// an ulp of std::exp, far inside the estimate's tolerance), (e - x) - 1 and std::clamp(k) in the
/// scalar value()'s order; the row's tail goes through value() itself.
template <int W>
VERL_FORCE_INLINE void low_var_kl_row(const float* __restrict logprob, const float* __restrict ref, float* __restrict out,
                                      Index cols, const LowVarKL& estimator) {
  Index j = 0;
#if VERL_HAS_VECTOR_EXTENSIONS
  if constexpr (W > 1) {
    using F = simd::FloatPack<W>;
    const float log_bound = static_cast<float>(estimator.log_ratio_bound), kl_bound = static_cast<float>(estimator.kl_bound);
    const F lo = F{} - log_bound, hi = F{} + log_bound, kl_lo = F{} - kl_bound, kl_hi = F{} + kl_bound;
    for (; j + W <= cols; j += W) {
      // Past the row's end this reaches into the next row (or beyond the matrix): a prefetch
      // never faults.
      simd::prefetch(ref + j + kLowVarKLPrefetchAhead);
      simd::prefetch(logprob + j + kLowVarKLPrefetchAhead);
      const F raw = simd::load<W>(ref + j) - simd::load<W>(logprob + j);
      F x = simd::pick<W>(raw < lo, lo, raw);  // std::clamp: NaN stays NaN
      x = simd::pick<W>(hi < x, hi, x);
      const F k = (simd::exp_bounded<W>(x) - x) - 1.0f;
      F clamped = simd::pick<W>(k < kl_lo, kl_lo, k);
      clamped = simd::pick<W>(kl_hi < clamped, kl_hi, clamped);
      simd::store<W>(out + j, clamped);
    }
  }
#endif
  for (; j < cols; ++j) out[j] = estimator.value(logprob[j], ref[j]);
}

struct LowVarKLJob {
  const RowMajorView<float>* logprob;
  const RowMajorView<float>* ref;
  float* out;  ///< rows x cols, contiguous rows
  Index cols;
  const LowVarKL* estimator;
};

template <int W>
VERL_FORCE_INLINE void low_var_kl_rows(const LowVarKLJob& job, Index begin, Index end) {
  for (Index i = begin; i < end; ++i)
    low_var_kl_row<W>(job.logprob->data() + i * job.logprob->outerStride(), job.ref->data() + i * job.ref->outerStride(),
                      job.out + i * job.cols, job.cols, *job.estimator);
}
inline void low_var_kl_rows_baseline(const LowVarKLJob& job, Index begin, Index end) {
  low_var_kl_rows<simd::baseline_width>(job, begin, end);
}
#if VERL_HAS_X86_DISPATCH
VERL_TARGET_AVX2 inline void low_var_kl_rows_avx2(const LowVarKLJob& job, Index begin, Index end) {
  low_var_kl_rows<8>(job, begin, end);
}
VERL_TARGET_AVX512 inline void low_var_kl_rows_avx512(const LowVarKLJob& job, Index begin, Index end) {
  low_var_kl_rows<16>(job, begin, end);
}
#endif

/// low_var_kl over a float batch into `out` (rows x cols, contiguous rows, not overlapping the
/// inputs): vector rows (when the log-ratio bound keeps exp's argument in exp_bounded's range)
/// split over threads. (Non-temporal stores into reused storage were tried: no faster here.)
inline void low_var_kl_into(const RowMajorView<float>& logprob, const RowMajorView<float>& ref, float* out,
                            const LowVarKL& estimator) {
  const LowVarKLJob job{&logprob, &ref, out, logprob.cols(), &estimator};
  using Kernel = void (*)(const LowVarKLJob&, Index, Index);
  Kernel kernel = &low_var_kl_rows<1>;
  // exp_bounded needs |x| <= 87 (a NaN bound, or none, keeps the scalar path).
  if (std::abs(static_cast<float>(estimator.log_ratio_bound)) <= 87.0f) {
    kernel = &low_var_kl_rows_baseline;
#if VERL_HAS_X86_DISPATCH
    const SimdLevel level = simd::best_level();
    if (level == SimdLevel::avx2) kernel = &low_var_kl_rows_avx2;
    if (level == SimdLevel::avx512) kernel = &low_var_kl_rows_avx512;
#endif
  }
  parallel_rows(logprob.rows(), logprob.cols(), [&](Index b, Index e) { kernel(job, b, e); });
}

/// The estimate of every element, one row at a time, into rows of `cols` contiguous values.
template <class Scalar, KLEstimator E>
void kl_values_into(const RowMajorView<Scalar>& lp, const RowMajorView<Scalar>& ref, Scalar* out, const E& estimator) {
  const Index cols = lp.cols();
  for (Index i = 0; i < lp.rows(); ++i) {
    const Scalar* a = lp.data() + i * lp.outerStride();
    const Scalar* b = ref.data() + i * ref.outerStride();
    Scalar* o = out + i * cols;
    for (Index j = 0; j < cols; ++j) o[j] = estimator.value(a[j], b[j]);
  }
}

/// Whether the storage of `out` shares any byte with the view's rows.
template <class Scalar>
bool overlaps(const RowMatrix<Scalar>& out, const RowMajorView<Scalar>& view) {
  if (out.size() == 0 || view.rows() == 0 || view.cols() == 0) return false;
  const auto out_begin = reinterpret_cast<std::uintptr_t>(out.data());
  const auto out_end = reinterpret_cast<std::uintptr_t>(out.data() + out.size());
  const auto view_begin = reinterpret_cast<std::uintptr_t>(view.data());
  const auto view_end =
      reinterpret_cast<std::uintptr_t>(view.data() + (view.rows() - 1) * view.outerStride() + view.cols());
  return out_begin < view_end && view_begin < out_end;
}

}  // namespace detail

/// kl_penalty_forward into the caller's `out`, resized to the inputs' (B, T) when its shape
/// differs. A caller that keeps `out` across steps (as compute_into does for advantages) writes
/// over memory it already owns: no fresh pages to fault in. `out` may be one of the inputs (the
/// estimate is element-wise).
template <class LD, class RD, KLEstimator E>
void kl_penalty_into(RowMatrix<typename LD::Scalar>& out, const Eigen::MatrixBase<LD>& logprob,
                     const Eigen::MatrixBase<RD>& ref_logprob, const E& estimator) {
  detail::require_log_prob_types<LD, RD>();
  using Scalar = typename LD::Scalar;
  verl::detail::require_same_shape("ref_logprob", shape_of(ref_logprob), "logprob", shape_of(logprob));
  const detail::RowMajorView<Scalar> lp(logprob.derived());
  const detail::RowMajorView<Scalar> ref(ref_logprob.derived());
  if (detail::overlaps(out, lp) || detail::overlaps(out, ref)) {
    RowMatrix<Scalar> fresh;  // the kernels assume distinct storage
    kl_penalty_into(fresh, logprob, ref_logprob, estimator);
    out = std::move(fresh);
    return;
  }
  detail::prepare_output(out, lp.rows(), lp.cols());
  if constexpr (std::is_same_v<Scalar, float> && std::is_base_of_v<LowVarKL, E>) {
    detail::low_var_kl_into(lp, ref, out.data(), estimator);
  } else {
    detail::kl_values_into(lp, ref, out.data(), estimator);
  }
}

/// verl's kl_penalty_forward: the element-wise estimate, (B, T) like the inputs, in a fresh
/// matrix (advised onto huge pages when large).
template <class LD, class RD, KLEstimator E>
RowMatrix<typename LD::Scalar> kl_penalty_forward(const Eigen::MatrixBase<LD>& logprob,
                                                  const Eigen::MatrixBase<RD>& ref_logprob, const E& estimator) {
  RowMatrix<typename LD::Scalar> kl;
  kl_penalty_into(kl, logprob, ref_logprob, estimator);
  return kl;
}

/// verl's kl_penalty: the estimate of kl_penalty_forward (for a '+' name, the estimate of its
/// stem: StraightThrough differs from its stem in the gradient only).
template <class LD, class RD, KLEstimator E>
RowMatrix<typename LD::Scalar> kl_penalty(const Eigen::MatrixBase<LD>& logprob,
                                          const Eigen::MatrixBase<RD>& ref_logprob, const E& estimator) {
  return kl_penalty_forward(logprob, ref_logprob, estimator);
}

/// The vector-Jacobian product of kl_penalty with `cotangent` (use ones for d sum(kl)).
template <class LD, class RD, class CD, KLEstimator E>
KLPenaltyGrad<typename LD::Scalar> kl_penalty_backward(const Eigen::MatrixBase<LD>& logprob,
                                                       const Eigen::MatrixBase<RD>& ref_logprob,
                                                       const Eigen::MatrixBase<CD>& cotangent, const E& estimator) {
  detail::require_log_prob_types<LD, RD>();
  detail::require_log_prob_types<LD, CD>();
  using Scalar = typename LD::Scalar;
  verl::detail::require_same_shape("ref_logprob", shape_of(ref_logprob), "logprob", shape_of(logprob));
  verl::detail::require_same_shape("cotangent", shape_of(cotangent), "logprob", shape_of(logprob));
  const detail::RowMajorView<Scalar> lp(logprob.derived());
  const detail::RowMajorView<Scalar> ref(ref_logprob.derived());
  const detail::RowMajorView<Scalar> cot(cotangent.derived());
  KLPenaltyGrad<Scalar> grad{RowMatrix<Scalar>(lp.rows(), lp.cols()), RowMatrix<Scalar>(lp.rows(), lp.cols())};
  for (Index i = 0; i < lp.rows(); ++i) {
    const Scalar* a = lp.data() + i * lp.outerStride();
    const Scalar* b = ref.data() + i * ref.outerStride();
    const Scalar* c = cot.data() + i * cot.outerStride();
    Scalar* g_lp = grad.logprob.data() + i * lp.cols();
    Scalar* g_ref = grad.ref_logprob.data() + i * lp.cols();
    for (Index j = 0; j < lp.cols(); ++j) {
      const Scalar g = estimator.grad_logprob(a[j], b[j], c[j]);
      g_lp[j] = g;
      g_ref[j] = -g;
    }
  }
  return grad;
}

}  // namespace verl::algo
