// Conversions between float32 and the 16-bit floats stored in checkpoints (IEEE binary16 and
// bfloat16). Widening is exact; narrowing rounds to nearest even, as torch's .to() does.
#pragma once

#include <Eigen/Core>

#include <bit>
#include <cstdint>

namespace verl {

/// bfloat16 is the top half of a float32, so widening is a shift.
inline float bf16_bits_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

/// IEEE binary16 -> float32, exact for every input (subnormals, infinities, NaN payloads).
inline float f16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(magnitude) | sign);
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/// float32 -> bfloat16, round to nearest even; NaN stays a (quiet) NaN.
inline std::uint16_t float_to_bf16_bits(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const std::uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding_bias) >> 16);
}

/// float32 -> IEEE binary16, round to nearest even (overflow gives infinity).
inline std::uint16_t float_to_f16_bits(float value) {
  return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(value));
}

}  // namespace verl
