// SIMD building blocks for the logits kernels: fixed-width float packs (GCC/Clang vector
// extensions), a fast vectorised exp on [ln FLT_MIN, 0], bfloat16 conversion, and run-time
// selection of the widest instruction set the CPU has. A kernel is written once as an
// always-inline template over the pack width and instantiated inside functions compiled for
// AVX-512, AVX2 or the build's baseline, so one binary runs fast everywhere without
// -march=native. Without vector extensions (MSVC, nvcc's front end) the width-1 instantiation is
// plain scalar code with the same algorithm.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "verl/config.hpp"
#include "verl/core/error.hpp"

#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define VERL_HAS_VECTOR_EXTENSIONS 1
#else
#define VERL_HAS_VECTOR_EXTENSIONS 0
#endif

#if VERL_HAS_VECTOR_EXTENSIONS && (defined(__x86_64__) || defined(__i386__))
#define VERL_HAS_X86_DISPATCH 1
#define VERL_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define VERL_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#else
#define VERL_HAS_X86_DISPATCH 0
#endif

// 32- and 64-byte packs passed between always-inline helpers trigger GCC's "ABI changed" note
// although no pack ever crosses a real call boundary. GCC reports it where the instantiations are
// emitted (the end of the including file), so the note stays off past this header.
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace verl::cpu {

/// Which instruction set the logits kernels use. `automatic` picks the widest the CPU supports;
/// the others exist to compare paths (benchmarks, tests) and must be supported by the CPU.
enum class SimdLevel { automatic, scalar, baseline, avx2, avx512 };

constexpr std::string_view to_string(SimdLevel level) {
  switch (level) {
    case SimdLevel::automatic: return "automatic";
    case SimdLevel::scalar: return "scalar";
    case SimdLevel::baseline: return "baseline";
    case SimdLevel::avx2: return "avx2";
    case SimdLevel::avx512: return "avx512";
  }
  return "?";
}

namespace simd {

#if VERL_HAS_VECTOR_EXTENSIONS
// W lanes of GCC/Clang vector extensions (W = 4: one SSE2 / NEON register, 8: AVX2, 16: AVX-512).
// A class template, not an alias template: GCC ignores vector_size on an alias template whose size
// depends on a template parameter.
template <int Width>
struct Pack {
  static_assert(Width == 4 || Width == 8 || Width == 16, "packs are 1, 4, 8 or 16 lanes wide");
  typedef float Float __attribute__((vector_size(4 * Width)));
  typedef std::int32_t Int __attribute__((vector_size(4 * Width)));
  typedef std::uint32_t UInt __attribute__((vector_size(4 * Width)));
  typedef std::uint16_t Half __attribute__((vector_size(2 * Width)));
};
template <>
struct Pack<1> {
  using Float = float;
  using Int = std::int32_t;
  using UInt = std::uint32_t;
  using Half = std::uint16_t;
};
/// Width of the build-baseline pack: one SSE2 / NEON register.
inline constexpr int baseline_width = 4;
#else
template <int Width>
struct Pack {
  static_assert(Width == 1, "only scalar packs without vector extensions");
  using Float = float;
  using Int = std::int32_t;
  using UInt = std::uint32_t;
  using Half = std::uint16_t;
};
inline constexpr int baseline_width = 1;
#endif

template <int W>
using FloatPack = typename Pack<W>::Float;
template <int W>
using IntPack = typename Pack<W>::Int;
template <int W>
using UIntPack = typename Pack<W>::UInt;
template <int W>
using HalfPack = typename Pack<W>::Half;

template <class To, class From>
VERL_FORCE_INLINE To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

template <int W>
VERL_FORCE_INLINE FloatPack<W> broadcast(float value) {
  if constexpr (W == 1) {
    return value;
  } else {
    return FloatPack<W>{} + value;
  }
}

template <int W>
VERL_FORCE_INLINE FloatPack<W> load(const float* source) {
  FloatPack<W> v;
  std::memcpy(&v, source, sizeof(v));
  return v;
}

template <int W>
VERL_FORCE_INLINE void store(float* destination, FloatPack<W> v) {
  std::memcpy(destination, &v, sizeof(v));
}

template <int W>
VERL_FORCE_INLINE float lane(FloatPack<W> v, int i) {
  if constexpr (W == 1) {
    (void)i;
    return v;
  } else {
    return v[i];
  }
}

/// W bfloat16 values (raw 16-bit storage) widened to float: the bits are the float's high half.
template <int W>
VERL_FORCE_INLINE FloatPack<W> load_bfloat16(const void* source) {
  HalfPack<W> h;
  std::memcpy(&h, source, sizeof(h));
  if constexpr (W == 1) {
    return bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
  } else {
    return bit_cast<FloatPack<W>>(__builtin_convertvector(h, UIntPack<W>) << 16);
  }
}

/// W floats narrowed to bfloat16, rounded to nearest even; NaN becomes the quiet NaN of its sign
/// (what Eigen::bfloat16's constructor does).
template <int W>
VERL_FORCE_INLINE void store_bfloat16(void* target, FloatPack<W> v) {
  const UIntPack<W> u = bit_cast<UIntPack<W>>(v);
  UIntPack<W> rounded = (u + (0x7FFFu + ((u >> 16) & 1u))) >> 16;
  const UIntPack<W> quiet_nan = ((u >> 16) & 0x8000u) | 0x7FC0u;
  if constexpr (W == 1) {
    rounded = v != v ? quiet_nan : rounded;
    const auto h = static_cast<std::uint16_t>(rounded);
    std::memcpy(target, &h, sizeof(h));
  } else {
    rounded = v != v ? quiet_nan : rounded;
    const HalfPack<W> h = __builtin_convertvector(rounded, HalfPack<W>);
    std::memcpy(target, &h, sizeof(h));
  }
}

/// Hint to bring the cache line at `address` into L1 (a no-op where unsupported; never faults).
VERL_FORCE_INLINE void prefetch(const void* address) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(address);
#else
  (void)address;
#endif
}

/// a < b ? x : y, lane-wise (NaN compares false, so a NaN `a` selects y).
template <int W>
VERL_FORCE_INLINE FloatPack<W> select_less(FloatPack<W> a, FloatPack<W> b, FloatPack<W> x, FloatPack<W> y) {
  return a < b ? x : y;
}

/// bound > x ? bound : x, lane-wise: clamps x from below and keeps a NaN x (one vmaxps on x86).
template <int W>
VERL_FORCE_INLINE FloatPack<W> max_keep_nan(FloatPack<W> bound, FloatPack<W> x) {
  return bound > x ? bound : x;
}

/// Lane-wise maximum; NaN candidates are skipped (they poison the sums of exp later instead).
template <int W>
VERL_FORCE_INLINE FloatPack<W> max(FloatPack<W> current, FloatPack<W> candidate) {
  return candidate > current ? candidate : current;
}

/// The two halves of a pack (vextract on x86 instead of a lane-by-lane loop).
template <int W>
VERL_FORCE_INLINE void split_halves(FloatPack<W> v, FloatPack<W / 2>& low, FloatPack<W / 2>& high) {
  std::memcpy(&low, &v, sizeof(low));
  std::memcpy(&high, reinterpret_cast<const char*>(&v) + sizeof(low), sizeof(high));
}

template <int W>
VERL_FORCE_INLINE float reduce_max(FloatPack<W> v) {
  if constexpr (W > 4) {
    FloatPack<W / 2> low, high;
    split_halves<W>(v, low, high);
    return reduce_max<W / 2>(max<W / 2>(low, high));
  } else {
    float m = lane<W>(v, 0);
    for (int i = 1; i < W; ++i) {
      const float x = lane<W>(v, i);
      if (x > m) m = x;
    }
    return m;
  }
}

/// Sum of the lanes: halves are folded in float down to 4 lanes (each lane already holds a
/// partial sum of a few dozen terms), the last 4 in double.
template <int W>
VERL_FORCE_INLINE double reduce_sum(FloatPack<W> v) {
  if constexpr (W > 4) {
    FloatPack<W / 2> low, high;
    split_halves<W>(v, low, high);
    return reduce_sum<W / 2>(low + high);
  } else {
    double s = 0;
    for (int i = 0; i < W; ++i) s += static_cast<double>(lane<W>(v, i));
    return s;
  }
}

/// Just above ln(FLT_MIN) = -87.337: exp() of anything at or above is a normal float even after
/// rounding.
inline constexpr float exp_min_normal_arg = -87.0f;

/// exp(x) = 2^n exp(r) for an integer n near x log2(e) with 2^n a normal float: r = x - n ln2 in
/// two parts (Cody-Waite), exp(r) by Cephes' polynomial. The exp kernels below differ only in n.
template <int W>
VERL_FORCE_INLINE FloatPack<W> exp_scaled(FloatPack<W> x, IntPack<W> n) {
  using F = FloatPack<W>;
    const F nf = __builtin_convertvector(n, F);
    F r = x - nf * 0.693359375f;
    r = r - nf * -2.12194440e-4f;
    F p = F{} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
  return p * bit_cast<F>((n + 127) << 23);
}

/// exp(x) for x in [exp_min_normal_arg, 0] only: the kernels clamp to that range themselves (they
/// need the clamped value anyway), so the range handling of exp() is left out of the hot loop. The
/// result is always a normal float (subnormal results cost microcode assists on x86).
/// n = ceil(x*log2(e) - 1/2) by truncation (x <= 0), |r| <= ln2/2, then Cephes' polynomial.
template <int W>
VERL_FORCE_INLINE FloatPack<W> exp_nonpositive(FloatPack<W> x) {
  if constexpr (W == 1) {
    return std::exp(x);
  } else {
    const auto n = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, IntPack<W>);
    return exp_scaled<W>(x, n);  // n in [-126, 0]: 2^n is a normal float
  }
}

/// exp(x) for |x| <= 87 (the callers clamp first; verl clamps log-ratios to +-20), NaN gives NaN.
/// The polynomial of exp_nonpositive with n = round(x log2 e). Within about 1 ulp of std::exp but
/// not always equal to it: a kernel whose branch decisions depend on the value recomputes the lanes
/// near a threshold with std::exp (see near_any).
template <int W>
VERL_FORCE_INLINE FloatPack<W> exp_bounded(FloatPack<W> x) {
  if constexpr (W == 1) {
    return std::exp(x);
  } else {
    using F = FloatPack<W>;
    using I = IntPack<W>;
    const F t = x * 1.44269504088896341f;
    const I n = __builtin_convertvector(t + (t < 0.0f ? F{} - 0.5f : F{} + 0.5f), I);  // rounds half away
    return exp_scaled<W>(x, n);  // n in [-126, 126]: 2^n is a normal float
  }
}

/// x & y and x | y of comparison results. Written on unsigned lanes: `(a < b) & (c < d)` on
/// packs wider than the build's baseline is lowered lane by lane by GCC (the boolean-vector
/// combination is expanded before the kernel is inlined into its AVX2 / AVX-512 function).
template <int W>
VERL_FORCE_INLINE IntPack<W> both(IntPack<W> x, IntPack<W> y) {
  return bit_cast<IntPack<W>>(bit_cast<UIntPack<W>>(x) & bit_cast<UIntPack<W>>(y));
}
template <int W>
VERL_FORCE_INLINE IntPack<W> either(IntPack<W> x, IntPack<W> y) {
  return bit_cast<IntPack<W>>(bit_cast<UIntPack<W>>(x) | bit_cast<UIntPack<W>>(y));
}

/// c ? x : y lane-wise for a comparison result c (all ones or zero per lane), as bit operations:
/// GCC lowers a ?: on float packs lane by lane.
template <int W>
VERL_FORCE_INLINE FloatPack<W> pick(IntPack<W> c, FloatPack<W> x, FloatPack<W> y) {
  return bit_cast<FloatPack<W>>((bit_cast<IntPack<W>>(x) & c) | (bit_cast<IntPack<W>>(y) & ~c));
}

/// c ? x : 0 lane-wise.
template <int W>
VERL_FORCE_INLINE FloatPack<W> keep(IntPack<W> c, FloatPack<W> x) {
  return bit_cast<FloatPack<W>>(bit_cast<IntPack<W>>(x) & c);
}

/// Lanes of `v` within a relative distance `rel` of `threshold` (threshold > 0).
template <int W>
VERL_FORCE_INLINE IntPack<W> near(FloatPack<W> v, float threshold, float rel) {
  const FloatPack<W> d = v - threshold;
  const IntPack<W> below = d <= threshold * rel, above = d >= -threshold * rel;
  return both<W>(below, above);
}

/// Whether any lane of a comparison result is set.
template <int W>
VERL_FORCE_INLINE bool any(IntPack<W> c) {
  if constexpr (W == 1) {
    return c != 0;
  } else {
    std::uint64_t words[sizeof(c) / sizeof(std::uint64_t)];
    std::memcpy(words, &c, sizeof(c));
    std::uint64_t bits = 0;
    for (const std::uint64_t w : words) bits |= w;
    return bits != 0;
  }
}

#if VERL_HAS_VECTOR_EXTENSIONS
/// Half a float pack's lanes as doubles: one register at every width (a wider generic vector
/// would be lowered lane by lane).
template <int W>
struct HalfDoublePack;
template <>
struct HalfDoublePack<4> {
  typedef double Type __attribute__((vector_size(16)));
};
template <>
struct HalfDoublePack<8> {
  typedef double Type __attribute__((vector_size(32)));
};
template <>
struct HalfDoublePack<16> {
  typedef double Type __attribute__((vector_size(64)));
};

/// Adds the lanes of `v` to two double accumulators (low half, high half).
template <int W>
VERL_FORCE_INLINE void accumulate_double(FloatPack<W> v, typename HalfDoublePack<W>::Type& low,
                                         typename HalfDoublePack<W>::Type& high) {
  if constexpr (W == 4) {  // no 2-lane float pack: SSE2 converts two lanes at a time anyway
    low += typename HalfDoublePack<W>::Type{static_cast<double>(v[0]), static_cast<double>(v[1])};
    high += typename HalfDoublePack<W>::Type{static_cast<double>(v[2]), static_cast<double>(v[3])};
  } else {
    FloatPack<W / 2> a, b;
    split_halves<W>(v, a, b);
    low += __builtin_convertvector(a, typename HalfDoublePack<W>::Type);
    high += __builtin_convertvector(b, typename HalfDoublePack<W>::Type);
  }
}

#endif

// ---- instruction-set detection -----------------------------------------------------------------

inline bool cpu_supports(SimdLevel level) {
  switch (level) {
    case SimdLevel::automatic:
    case SimdLevel::scalar:
    case SimdLevel::baseline:
      return true;
#if VERL_HAS_X86_DISPATCH
    case SimdLevel::avx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SimdLevel::avx512:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    case SimdLevel::avx2:
    case SimdLevel::avx512:
      return false;
#endif
  }
  return false;
}

/// The level the environment variable VERL_SIMD names (baseline, avx2, avx512), or automatic when
/// it is unset or empty. Kernels whose sums run across vector lanes (softmax, log-softmax, norms)
/// round differently at different widths, so a run is reproducible bit for bit only at one level:
/// VERL_SIMD=avx2 replays, on an AVX-512 machine, a run recorded on an AVX2 one. A level the CPU
/// cannot run, or an unknown name, is an error naming the variable, never silently replaced.
inline SimdLevel level_from_environment() {
  const char* value = std::getenv("VERL_SIMD");
  if (value == nullptr || *value == '\0') return SimdLevel::automatic;
  const std::string_view name(value);
  for (const SimdLevel level : {SimdLevel::baseline, SimdLevel::avx2, SimdLevel::avx512}) {
    if (name != to_string(level)) continue;
    VERL_CHECK_ARG(cpu_supports(level), "VERL_SIMD: this CPU cannot run '{}' (expected baseline{}{})", name,
                   cpu_supports(SimdLevel::avx2) ? ", avx2" : "", cpu_supports(SimdLevel::avx512) ? ", avx512" : "");
    return level;
  }
  throw InvalidArgument(fmt::format("VERL_SIMD: expected baseline, avx2 or avx512 (or unset), got '{}'", name));
}

/// The widest level this CPU runs (or the one VERL_SIMD names), decided once.
inline SimdLevel best_level() {
  static const SimdLevel best = [] {
    if (const SimdLevel chosen = level_from_environment(); chosen != SimdLevel::automatic) return chosen;
    if (cpu_supports(SimdLevel::avx512)) return SimdLevel::avx512;
    if (cpu_supports(SimdLevel::avx2)) return SimdLevel::avx2;
    return SimdLevel::baseline;
  }();
  return best;
}

/// Resolves `automatic`; a level the CPU cannot run is a caller error, never silently replaced.
inline SimdLevel resolve_level(SimdLevel requested) {
  if (requested == SimdLevel::automatic) return best_level();
  VERL_CHECK_ARG(cpu_supports(requested), "simd: expected a level this CPU supports (up to {}), got {}",
                 to_string(best_level()), to_string(requested));
  return requested;
}

}  // namespace simd
}  // namespace verl::cpu

