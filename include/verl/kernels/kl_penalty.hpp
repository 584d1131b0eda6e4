// Host side of kl_penalty.cuh: verl's KL penalty types as one element-wise function pair (estimate
// and d/d logprob) shared by the kernels and the host, with the CPU reference (verl::algo).
#pragma once

#include <cmath>
#include <string_view>

#include "verl/algo/kl/registry.hpp"
#include "verl/core/error.hpp"
#include "verl/kernels/detail/host_device.hpp"

namespace verl::kernels {

/// The kernels' KL parameter: the formula of one of algo's KL types.
using KlType = algo::KLFormula;

namespace detail {
template <class E>
constexpr bool is_straight_through() {
  if constexpr (requires { E::straight_through; }) return E::straight_through;
  return false;
}
}  // namespace detail

/// The formula of verl's KL type `name` (algo::KLEstimators' names: kl/k1, abs, mse/k2,
/// low_var_kl/k3). The kernels have no straight-through gradient yet: a '+' name is refused here
/// (verl::NotImplemented) rather than given its stem's gradient.
inline KlType parse_kl_type(std::string_view name) {
  KlType type{};
  bool straight_through = false;
  if (visit_by_name(algo::KLEstimators{}, name, [&](auto estimator) {
        using E = typename decltype(estimator)::type;
        type = E::formula;
        straight_through = detail::is_straight_through<E>();
      })) {
    if (straight_through)
      verl::detail::throw_not_implemented(
          "kl_penalty: '{}' (the value of '{}' with the gradient of k2) has no CUDA kernel yet; use the CPU "
          "functions of verl::algo",
          name, name.substr(0, name.size() - 1));
    return type;
  }
  verl::detail::throw_invalid_argument("kl_penalty: expected one of {}, got '{}'", joined_names_of<algo::KLEstimators>(),
                                       name);
}

namespace detail {
#if defined(__CUDA_ARCH__)
VERL_KERNELS_HD float kl_exp(float x) { return expf(x); }
#else
VERL_KERNELS_HD float kl_exp(float x) { return std::exp(x); }
#endif
VERL_KERNELS_HD float kl_clamp(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }
}  // namespace detail

/// The estimate at one token (float32, verl's order of operations; clamps at +-20 and +-10 for k3).
VERL_KERNELS_HD float kl_value(KlType type, float logprob, float ref) {
  const float diff = logprob - ref;
  switch (type) {
    case KlType::kl: return diff;
    case KlType::abs: return diff < 0.0f ? -diff : diff;
    case KlType::mse: return 0.5f * (diff * diff);
    case KlType::low_var_kl: {
      const float x = detail::kl_clamp(ref - logprob, -20.0f, 20.0f);
      return detail::kl_clamp((detail::kl_exp(x) - x) - 1.0f, -10.0f, 10.0f);
    }
  }
  return diff;
}

/// cotangent * d kl / d logprob (d / d ref is its negation), as verl's autograd.
VERL_KERNELS_HD float kl_grad_logprob(KlType type, float logprob, float ref, float cotangent) {
  switch (type) {
    case KlType::kl: return cotangent;
    case KlType::abs: {
      const float diff = logprob - ref;
      return cotangent * (diff > 0.0f ? 1.0f : (diff < 0.0f ? -1.0f : 0.0f));
    }
    case KlType::mse: return (cotangent * 0.5f) * (2.0f * (logprob - ref));
    case KlType::low_var_kl: {
      const float raw = ref - logprob;
      if (!(raw >= -20.0f && raw <= 20.0f)) return 0.0f;
      const float ratio = detail::kl_exp(raw);
      const float k = (ratio - raw) - 1.0f;
      if (!(k >= -10.0f && k <= 10.0f)) return 0.0f;
      return -(cotangent * ratio - cotangent);
    }
  }
  return 0.0f;
}

/// CPU reference: verl::algo's estimator for the type.
template <class F>
decltype(auto) with_reference_estimator(KlType type, F&& f) {
  switch (type) {
    case KlType::kl: return f(algo::KL{});
    case KlType::abs: return f(algo::Abs{});
    case KlType::mse: return f(algo::MSE{});
    case KlType::low_var_kl: return f(algo::LowVarKL{});
  }
  return f(algo::KL{});
}

}  // namespace verl::kernels
