// Exact fractions for plan arithmetic: per-rank costs are fractions of the model size M
// (e.g. 3/8 M), compared exactly against the paper's formulas and turned into bytes only at the end.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "verl/core/error.hpp"
#include "verl/core/int_tuple.hpp"

namespace verl::parallel {

namespace detail {
// 128-bit intermediates keep products of two int64 values exact (GCC/Clang extension).
__extension__ typedef __int128 wide_int;
}  // namespace detail

/// num/den in lowest terms with den > 0.
class Fraction {
 public:
  constexpr Fraction() noexcept = default;
  constexpr Fraction(std::int64_t integer) noexcept : num_(integer) {}  // NOLINT(google-explicit-constructor)
  constexpr Fraction(std::int64_t num, std::int64_t den) : num_(num), den_(den) {
    VERL_CHECK_ARG(den != 0, "den: expected a non-zero denominator, got {}", den);
    normalize();
  }

  constexpr std::int64_t num() const noexcept { return num_; }
  constexpr std::int64_t den() const noexcept { return den_; }
  constexpr double to_double() const noexcept { return static_cast<double>(num_) / static_cast<double>(den_); }

  /// ceil(value * num / den), computed in 128 bits: the bytes a fraction of `value` bytes takes.
  constexpr std::int64_t ceil_of(std::int64_t value) const noexcept {
    const detail::wide_int scaled = static_cast<detail::wide_int>(value) * num_;
    const detail::wide_int q = scaled / den_;
    return static_cast<std::int64_t>(q * den_ < scaled ? q + 1 : q);
  }

  friend constexpr Fraction operator+(Fraction a, Fraction b) { return {a.num_ * b.den_ + b.num_ * a.den_, a.den_ * b.den_}; }
  friend constexpr Fraction operator-(Fraction a, Fraction b) { return {a.num_ * b.den_ - b.num_ * a.den_, a.den_ * b.den_}; }
  friend constexpr Fraction operator*(Fraction a, Fraction b) { return {a.num_ * b.num_, a.den_ * b.den_}; }
  friend constexpr Fraction operator/(Fraction a, Fraction b) { return {a.num_ * b.den_, a.den_ * b.num_}; }
  friend constexpr bool operator==(Fraction a, Fraction b) noexcept { return a.num_ == b.num_ && a.den_ == b.den_; }
  friend constexpr auto operator<=>(Fraction a, Fraction b) noexcept {
    return static_cast<detail::wide_int>(a.num_) * b.den_ <=> static_cast<detail::wide_int>(b.num_) * a.den_;
  }

  std::string to_string() const { return den_ == 1 ? fmt::format("{}", num_) : fmt::format("{}/{}", num_, den_); }

 private:
  constexpr void normalize() noexcept {
    if (den_ < 0) {
      num_ = -num_;
      den_ = -den_;
    }
    const std::int64_t g = ::verl::detail::gcd(num_, den_);
    if (g > 1) {
      num_ /= g;
      den_ /= g;
    }
  }

  std::int64_t num_ = 0;
  std::int64_t den_ = 1;
};

constexpr Fraction min(Fraction a, Fraction b) noexcept { return a < b ? a : b; }
constexpr Fraction max(Fraction a, Fraction b) noexcept { return a < b ? b : a; }

}  // namespace verl::parallel
