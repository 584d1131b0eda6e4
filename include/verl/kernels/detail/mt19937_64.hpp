// The 64-bit Mersenne Twister of the C++ standard (std::mt19937_64), callable from host and device
// code, so a kernel can make the same seeded random choice as verl::algo's CPU code (clip_cov's
// token choice). The standard specifies its output exactly: a default-seeded engine's 10000th
// draw is 9981545732273789042 (tested against std::mt19937_64 too).
#pragma once

#include <cstdint>

#include "verl/kernels/detail/host_device.hpp"

namespace verl::kernels::detail {

/// The engine's 312 words live in storage the caller provides (kStateSize words, e.g. shared
/// memory in a kernel: 2.5 KB on a thread's stack would raise the device's per-thread stack
/// limit for the whole context). Not copyable: a copy would share the words.
class Mt19937_64 {
 public:
  static constexpr int kStateSize = 312;
  static constexpr int kShiftSize = 156;

  VERL_KERNELS_HD Mt19937_64(std::uint64_t* state, std::uint64_t seed) : state_(state), next_(kStateSize) {
    state_[0] = seed;
    for (int i = 1; i < kStateSize; ++i)
      state_[i] = 6364136223846793005ULL * (state_[i - 1] ^ (state_[i - 1] >> 62)) + static_cast<std::uint64_t>(i);
  }
  Mt19937_64(const Mt19937_64&) = delete;
  Mt19937_64& operator=(const Mt19937_64&) = delete;

  VERL_KERNELS_HD std::uint64_t operator()() {
    if (next_ >= kStateSize) twist();
    std::uint64_t x = state_[next_++];
    x ^= (x >> 29) & 0x5555555555555555ULL;
    x ^= (x << 17) & 0x71D67FFFEDA60000ULL;
    x ^= (x << 37) & 0xFFF7EEE000000000ULL;
    x ^= x >> 43;
    return x;
  }

 private:
  VERL_KERNELS_HD void twist() {
    constexpr std::uint64_t kUpper = 0xFFFFFFFF80000000ULL, kLower = 0x7FFFFFFFULL;
    constexpr std::uint64_t kMatrix = 0xB5026F5AA96619E9ULL;
    for (int i = 0; i < kStateSize; ++i) {
      const std::uint64_t y = (state_[i] & kUpper) | (state_[(i + 1) % kStateSize] & kLower);
      state_[i] = state_[(i + kShiftSize) % kStateSize] ^ (y >> 1) ^ ((y & 1ULL) != 0 ? kMatrix : 0ULL);
    }
    next_ = 0;
  }

  std::uint64_t* state_;
  int next_;
};

/// Uniform integer in [0, n) by rejection (no modulo bias): the same draw sequence as
/// verl::algo::detail::uniform_below, for any engine with a 64-bit call operator.
template <class Engine>
VERL_KERNELS_HD std::uint64_t uniform_below(Engine& engine, std::uint64_t n) {
  const std::uint64_t max = ~std::uint64_t{0};
  const std::uint64_t limit = max - max % n;  // accept [0, limit): a whole number of copies of [0, n)
  std::uint64_t draw = engine();
  while (draw >= limit) draw = engine();
  return draw % n;
}

/// Moves `count` uniformly chosen entries of items[0, size) to its front, as
/// verl::algo::detail::choose_front does with std::mt19937_64(seed) (a partial Fisher-Yates).
/// `engine_state`: Mt19937_64::kStateSize words of scratch.
template <class T>
VERL_KERNELS_HD void choose_front(T* items, std::int64_t size, std::int64_t count, std::uint64_t seed,
                                  std::uint64_t* engine_state) {
  Mt19937_64 engine(engine_state, seed);
  for (std::int64_t k = 0; k < count && k + 1 < size; ++k) {
    const std::int64_t pick = k + static_cast<std::int64_t>(uniform_below(engine, static_cast<std::uint64_t>(size - k)));
    const T held = items[k];
    items[k] = items[pick];
    items[pick] = held;
  }
}

}  // namespace verl::kernels::detail
