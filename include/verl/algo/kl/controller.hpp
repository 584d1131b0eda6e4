// KL-coefficient controllers for the KL-in-reward penalty (verl's FixedKLController,
// AdaptiveKLController and get_kl_controller). Values are doubles, as verl's Python floats.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "verl/core/error.hpp"

namespace verl::algo {

/// A controller owns the current coefficient `value` (beta) and moves it after each batch with
/// update(current_kl, n_steps); `name` is its kl_ctrl.type in verl's config.
template <class C>
concept KLController = requires(C& controller, const C& const_controller, double current_kl, std::int64_t n_steps) {
  { C::name } -> std::convertible_to<std::string_view>;
  { const_controller.value } -> std::convertible_to<double>;
  controller.update(current_kl, n_steps);
};

/// A constant coefficient.
struct FixedKLController {
  static constexpr std::string_view name = "fixed";
  static constexpr std::string_view class_name = "FixedKLController";

  double value = 0.001;

  FixedKLController() = default;
  explicit FixedKLController(double kl_coef) : value(kl_coef) {}

  void update(double /*current_kl*/, std::int64_t /*n_steps*/) {}
};

/// Ziegler et al. 2019 (arXiv:1909.08593): beta *= 1 + clip(kl/target - 1, -0.2, 0.2) * n/horizon,
/// a proportional controller that drives the observed KL toward `target`.
struct AdaptiveKLController {
  static constexpr std::string_view name = "adaptive";
  static constexpr std::string_view class_name = "AdaptiveKLController";
  static constexpr double max_proportional_error = 0.2;

  double value;
  double target;
  double horizon;

  /// horizon must be > 0 (it divides the step count; verl asserts it in get_kl_controller).
  AdaptiveKLController(double init_kl_coef, double target_kl, double horizon_steps)
      : value(init_kl_coef), target(target_kl), horizon(horizon_steps) {
    VERL_CHECK_ARG(horizon_steps > 0, "horizon: expected a value > 0, got {}", horizon_steps);
  }

  void update(double current_kl, std::int64_t n_steps) {
    // Same double operations in the same order as verl, so values agree to the last bit.
    const double proportional_error =
        std::clamp(current_kl / target - 1.0, -max_proportional_error, max_proportional_error);
    const double mult = 1.0 + proportional_error * static_cast<double>(n_steps) / horizon;
    value *= mult;
  }
};

static_assert(KLController<FixedKLController> && KLController<AdaptiveKLController>);

/// verl's algorithm.kl_ctrl config (defaults are verl's ppo_trainer.yaml).
struct KLControlConfig {
  std::string type = "fixed";  ///< "fixed" or "adaptive"
  double kl_coef = 0.001;
  double target_kl = 0.1;
  double horizon = 10000;
};

/// A controller chosen at run time; use std::visit, or kl_coefficient / update_kl_controller below.
using AnyKLController = std::variant<FixedKLController, AdaptiveKLController>;

/// verl's get_kl_controller. An unknown type and, for "adaptive", horizon <= 0 throw
/// verl::InvalidArgument (verl raises NotImplementedError / AssertionError).
inline AnyKLController get_kl_controller(const KLControlConfig& kl_ctrl) {
  if (kl_ctrl.type == FixedKLController::name) return FixedKLController(kl_ctrl.kl_coef);
  if (kl_ctrl.type == AdaptiveKLController::name) {
    VERL_CHECK_ARG(kl_ctrl.horizon > 0, "kl_ctrl.horizon: expected a value > 0, got {}", kl_ctrl.horizon);
    return AdaptiveKLController(kl_ctrl.kl_coef, kl_ctrl.target_kl, kl_ctrl.horizon);
  }
  verl::detail::throw_invalid_argument("kl_ctrl.type: expected one of {}, {}, got '{}'", FixedKLController::name,
                                 AdaptiveKLController::name, kl_ctrl.type);
}

/// The current coefficient (verl's kl_ctrl.value).
inline double kl_coefficient(const AnyKLController& controller) {
  return std::visit([](const auto& c) { return c.value; }, controller);
}

inline void update_kl_controller(AnyKLController& controller, double current_kl, std::int64_t n_steps) {
  std::visit([&](auto& c) { c.update(current_kl, n_steps); }, controller);
}

/// verl's Python class name ("FixedKLController" / "AdaptiveKLController").
inline std::string_view class_name_of(const AnyKLController& controller) {
  return std::visit([](const auto& c) { return std::string_view(std::decay_t<decltype(c)>::class_name); }, controller);
}

}  // namespace verl::algo
