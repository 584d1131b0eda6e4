// Static and dynamic integers, CuTe-style: a size is either a compile-time constant (`Int<4>`,
// whose value lives in the type) or a runtime `std::int64_t`. Code written against `IntegerLike`
// works with both; with static integers every result stays a constant expression.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace verl {

/// Marks a size that is only known at run time (e.g. `TP<dynamic>`, spelled `TP<>`).
inline constexpr std::int64_t dynamic = -1;

/// A compile-time integer. Converts to `std::int64_t`, so it can be used wherever a runtime
/// size can; arithmetic between two `Int`s stays static.
template <std::int64_t N>
struct Int {
  static constexpr std::int64_t value = N;
  constexpr operator std::int64_t() const noexcept { return N; }  // NOLINT(google-explicit-constructor)
};

template <class T>
struct is_static_int : std::false_type {};
template <std::int64_t N>
struct is_static_int<Int<N>> : std::true_type {};

/// An integer whose value is carried by its type.
template <class T>
concept StaticInt = is_static_int<std::remove_cvref_t<T>>::value;

/// A static or a dynamic integer.
template <class T>
concept IntegerLike = StaticInt<T> || std::integral<std::remove_cvref_t<T>>;

template <std::int64_t A, std::int64_t B>
constexpr Int<A + B> operator+(Int<A>, Int<B>) noexcept { return {}; }
template <std::int64_t A, std::int64_t B>
constexpr Int<A * B> operator*(Int<A>, Int<B>) noexcept { return {}; }
template <std::int64_t A, std::int64_t B>
  requires(B != 0)
constexpr Int<A / B> operator/(Int<A>, Int<B>) noexcept { return {}; }
template <std::int64_t A, std::int64_t B>
  requires(B != 0)
constexpr Int<A % B> operator%(Int<A>, Int<B>) noexcept { return {}; }

/// The value of a static or dynamic integer as `std::int64_t`.
template <IntegerLike I>
constexpr std::int64_t to_int64(I value) noexcept {
  return static_cast<std::int64_t>(value);
}

namespace detail {

template <std::size_t N>
constexpr std::int64_t product(const std::array<std::int64_t, N>& values) noexcept {
  std::int64_t result = 1;
  for (auto v : values) result *= v;
  return result;
}

/// Exclusive prefix products: the strides of a compact column-major layout over `shape`.
template <std::size_t N>
constexpr std::array<std::int64_t, N> exclusive_prefix_product(const std::array<std::int64_t, N>& shape) noexcept {
  std::array<std::int64_t, N> result{};
  std::int64_t running = 1;
  for (std::size_t i = 0; i < N; ++i) {
    result[i] = running;
    running *= shape[i];
  }
  return result;
}

constexpr std::int64_t gcd(std::int64_t a, std::int64_t b) noexcept {
  if (a < 0) a = -a;
  if (b < 0) b = -b;
  while (b != 0) {
    const std::int64_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

}  // namespace detail
}  // namespace verl
