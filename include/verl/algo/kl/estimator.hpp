// The KLEstimator concept: an element-wise estimate of KL(pi || pi_ref) from the log-probability
// of the sampled token under both policies (verl's `kl_penalty` types, after J. Schulman,
// "Approximating KL divergence", 2020).
#pragma once

#include <concepts>
#include <string_view>

namespace verl::algo {

/// The element-wise formula of a KL type (verl's aliases share one: k1 is kl, k2 is mse, k3 is
/// low_var_kl). The CUDA kernels take it as their parameter.
enum class KLFormula { kl, abs, mse, low_var_kl };

/// A KL estimator is a small value type with verl's registry name and two element-wise functions,
/// evaluated in the precision of their arguments (float reproduces verl's float32 numerics):
///   value(logprob, ref_logprob)                 the estimate k(lp, ref);
///   grad_logprob(logprob, ref_logprob, cot)     d(cot * k)/d lp as autograd computes it, with
///                                               torch's conventions at kinks (clamp passes the
///                                               gradient at its bounds, |x|' = 0 at 0).
/// Every verl estimator depends on lp - ref only, so d(cot * k)/d ref = -grad_logprob.
template <class E>
concept KLEstimator = std::copy_constructible<E> && requires(const E& estimator, float f, double d) {
  { E::name } -> std::convertible_to<std::string_view>;
  { estimator.value(f, f) } -> std::same_as<float>;
  { estimator.value(d, d) } -> std::same_as<double>;
  { estimator.grad_logprob(f, f, f) } -> std::same_as<float>;
  { estimator.grad_logprob(d, d, d) } -> std::same_as<double>;
};

}  // namespace verl::algo
