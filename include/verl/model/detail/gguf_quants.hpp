// ggml's tensor element types (ids, block sizes, bytes per block) and the dequantization of the
// types the GGUF loader reads: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
//
// Each dequantizer computes in float32 with the operations, in the order, of the `gguf` Python
// package's `gguf.quants.dequantize` (numpy, no fused multiply-add), so results are equal bit for
// bit: a scale times a quant, then plus the block minimum (Q4_1, Q5_1), or the super-block scale
// times the sub-block scale, times the quant, minus the super-block min times the sub-block min
// (Q4_K, Q5_K), or (scale times sub-block scale) times the quant (Q6_K).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

#include "verl/core/error.hpp"
#include "verl/core/half_float.hpp"

namespace verl::model {

/// ggml's element types, with the ids GGUF files store (ids 4 and 5 were retired by ggml).
enum class GgmlType : std::uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

/// What a type's storage looks like: `block_elements` values packed in `block_bytes` bytes.
struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;
  std::uint32_t block_elements;
  std::uint32_t block_bytes;
  bool dequantizable;  ///< this library converts it to float32
};

inline constexpr std::array<GgmlTypeTraits, 32> ggml_type_traits = {{
    {GgmlType::F32, "F32", 1, 4, true},          {GgmlType::F16, "F16", 1, 2, true},
    {GgmlType::Q4_0, "Q4_0", 32, 18, true},      {GgmlType::Q4_1, "Q4_1", 32, 20, true},
    {GgmlType::Q5_0, "Q5_0", 32, 22, true},      {GgmlType::Q5_1, "Q5_1", 32, 24, true},
    {GgmlType::Q8_0, "Q8_0", 32, 34, true},      {GgmlType::Q8_1, "Q8_1", 32, 40, false},
    {GgmlType::Q2_K, "Q2_K", 256, 84, false},    {GgmlType::Q3_K, "Q3_K", 256, 110, false},
    {GgmlType::Q4_K, "Q4_K", 256, 144, true},    {GgmlType::Q5_K, "Q5_K", 256, 176, true},
    {GgmlType::Q6_K, "Q6_K", 256, 210, true},    {GgmlType::Q8_K, "Q8_K", 256, 292, false},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66, false}, {GgmlType::IQ2_XS, "IQ2_XS", 256, 74, false},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98, false}, {GgmlType::IQ1_S, "IQ1_S", 256, 50, false},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18, false}, {GgmlType::IQ3_S, "IQ3_S", 256, 110, false},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82, false},  {GgmlType::IQ4_XS, "IQ4_XS", 256, 136, false},
    {GgmlType::I8, "I8", 1, 1, false},           {GgmlType::I16, "I16", 1, 2, false},
    {GgmlType::I32, "I32", 1, 4, false},         {GgmlType::I64, "I64", 1, 8, false},
    {GgmlType::F64, "F64", 1, 8, false},         {GgmlType::IQ1_M, "IQ1_M", 256, 56, false},
    {GgmlType::BF16, "BF16", 1, 2, true},        {GgmlType::TQ1_0, "TQ1_0", 256, 54, false},
    {GgmlType::TQ2_0, "TQ2_0", 256, 66, false},  {GgmlType::MXFP4, "MXFP4", 32, 17, false},
}};

/// The traits of a type id read from a file; nullopt for an id ggml does not define (or retired).
constexpr std::optional<GgmlTypeTraits> ggml_type_traits_of(std::uint32_t id) {
  for (const auto& traits : ggml_type_traits) {
    if (static_cast<std::uint32_t>(traits.type) == id) return traits;
  }
  return std::nullopt;
}

constexpr GgmlTypeTraits ggml_traits(GgmlType type) { return *ggml_type_traits_of(static_cast<std::uint32_t>(type)); }
constexpr std::string_view ggml_type_name(GgmlType type) { return ggml_traits(type).name; }

namespace detail::gguf {

inline std::uint16_t load_u16(const std::byte* at) {
  std::uint16_t value;
  std::memcpy(&value, at, sizeof value);
  return value;
}
inline float load_f16(const std::byte* at) { return f16_bits_to_float(load_u16(at)); }
inline std::uint8_t byte_at(const std::byte* at, std::size_t i) { return std::to_integer<std::uint8_t>(at[i]); }

/// `a * b` rounded to float32 before anything is added to it. numpy rounds every operation;
/// compilers may otherwise fuse a product and a sum into one FMA (GCC does by default on targets
/// with FMA units), which would change the last bit.
inline float rounded_product(float a, float b) {
  float product = a * b;
#if defined(__GNUC__) || defined(__clang__)
  __asm__ volatile("" : "+m"(product));
#else
  volatile float stored = product;
  product = stored;
#endif
  return product;
}

/// Q4_0: f16 scale d, 16 bytes of 4-bit quants (low nibbles: values 0-15, high: 16-31); d * (q - 8).
inline void dequantize_q4_0(const std::byte* block, float* out) {
  const float d = load_f16(block);
  const std::byte* qs = block + 2;
  for (int j = 0; j < 16; ++j) {
    out[j] = d * static_cast<float>((byte_at(qs, j) & 0x0F) - 8);
    out[j + 16] = d * static_cast<float>((byte_at(qs, j) >> 4) - 8);
  }
}

/// Q4_1: f16 scale d, f16 minimum m, 16 bytes of 4-bit quants; d * q + m.
inline void dequantize_q4_1(const std::byte* block, float* out) {
  const float d = load_f16(block), m = load_f16(block + 2);
  const std::byte* qs = block + 4;
  for (int j = 0; j < 16; ++j) {
    out[j] = rounded_product(d, static_cast<float>(byte_at(qs, j) & 0x0F)) + m;
    out[j + 16] = rounded_product(d, static_cast<float>(byte_at(qs, j) >> 4)) + m;
  }
}

/// The 5-bit quant of value j (0-31) of a Q5 block: 4 low bits from qs, bit j of qh on top.
inline int five_bit_quant(const std::byte* qs, std::uint32_t qh, int j) {
  const int low = j < 16 ? (byte_at(qs, j) & 0x0F) : (byte_at(qs, j - 16) >> 4);
  return low | static_cast<int>(((qh >> j) & 1u) << 4);
}

/// Q5_0: f16 scale d, 32 high bits, 16 bytes of low nibbles; d * (q - 16).
inline void dequantize_q5_0(const std::byte* block, float* out) {
  const float d = load_f16(block);
  std::uint32_t qh;
  std::memcpy(&qh, block + 2, sizeof qh);
  for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(five_bit_quant(block + 6, qh, j) - 16);
}

/// Q5_1: f16 scale d, f16 minimum m, 32 high bits, 16 bytes of low nibbles; d * q + m.
inline void dequantize_q5_1(const std::byte* block, float* out) {
  const float d = load_f16(block), m = load_f16(block + 2);
  std::uint32_t qh;
  std::memcpy(&qh, block + 4, sizeof qh);
  for (int j = 0; j < 32; ++j) out[j] = rounded_product(d, static_cast<float>(five_bit_quant(block + 8, qh, j))) + m;
}

/// Q8_0: f16 scale d, 32 signed bytes; q * d.
inline void dequantize_q8_0(const std::byte* block, float* out) {
  const float d = load_f16(block);
  for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<std::int8_t>(byte_at(block + 2, j))) * d;
}

/// The 6-bit scale and minimum of sub-block k (0-7) of a Q4_K / Q5_K super-block: the 12 scale
/// bytes hold 8 scales and 8 minimums; the first four of each fit in the low 6 bits of bytes 0-3
/// (scales) and 4-7 (minimums), the last four split into a nibble of bytes 8-11 and the top two
/// bits of bytes 0-7.
inline void k_quant_scale_min(const std::byte* scales, int k, int& scale, int& minimum) {
  if (k < 4) {
    scale = byte_at(scales, k) & 0x3F;
    minimum = byte_at(scales, k + 4) & 0x3F;
  } else {
    scale = (byte_at(scales, k + 4) & 0x0F) | ((byte_at(scales, k - 4) >> 6) << 4);
    minimum = (byte_at(scales, k + 4) >> 4) | ((byte_at(scales, k) >> 6) << 4);
  }
}

/// Q4_K and Q5_K: f16 d, f16 dmin, 12 scale bytes, [32 bytes of fifth bits,] 128 bytes of nibbles.
/// Sub-block k (32 values) takes the low (k even) or high (k odd) nibbles of bytes 32*(k/2)... and,
/// for Q5_K, bit k of each fifth-bit byte.
template <bool FifthBit>
void dequantize_q45_k(const std::byte* block, float* out) {
  const float d = load_f16(block), dmin = load_f16(block + 2);
  const std::byte* scales = block + 4;
  const std::byte* high_bits = block + 16;
  const std::byte* nibbles = block + (FifthBit ? 48 : 16);
  for (int k = 0; k < 8; ++k) {
    int scale = 0, minimum = 0;
    k_quant_scale_min(scales, k, scale, minimum);
    const float step = d * static_cast<float>(scale);
    const float offset = rounded_product(dmin, static_cast<float>(minimum));
    const int shift = 4 * (k % 2);
    for (int l = 0; l < 32; ++l) {
      int q = (byte_at(nibbles, 32 * (k / 2) + l) >> shift) & 0x0F;
      if constexpr (FifthBit) q |= ((byte_at(high_bits, l) >> k) & 1) << 4;
      out[32 * k + l] = rounded_product(step, static_cast<float>(q)) - offset;
    }
  }
}

/// Q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 signed scales, f16 d. The 256
/// values form two halves of 128; in half h, group g (0-3) of 32 takes nibble (g / 2) of byte
/// 64h + 32(g % 2) + l and bits 2g of byte 32h + l; each 16 values share a scale.
inline void dequantize_q6_k(const std::byte* block, float* out) {
  const std::byte* low = block;
  const std::byte* high = block + 128;
  const std::byte* scales = block + 192;
  const float d = load_f16(block + 208);
  for (int h = 0; h < 2; ++h) {
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        const int index = 128 * h + 32 * g + l;
        const int nibble = (byte_at(low, 64 * h + 32 * (g % 2) + l) >> (4 * (g / 2))) & 0x0F;
        const int top = (byte_at(high, 32 * h + l) >> (2 * g)) & 0x03;
        const float scale = d * static_cast<float>(static_cast<std::int8_t>(byte_at(scales, index / 16)));
        out[index] = scale * static_cast<float>((nibble | (top << 4)) - 32);
      }
    }
  }
}

}  // namespace detail::gguf

/// Converts `out.size()` values of `type` stored in `data` to float32. `data` must hold exactly
/// the blocks those values occupy (out.size() a multiple of the block size).
inline void dequantize_to_f32(GgmlType type, std::span<const std::byte> data, std::span<float> out) {
  const GgmlTypeTraits traits = ggml_traits(type);
  if (!traits.dequantizable) {
    ::verl::detail::throw_not_implemented(
        "ggml type {}: dequantization is not implemented (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
        "Q4_K, Q5_K, Q6_K)",
        traits.name);
  }
  VERL_CHECK_ARG(out.size() % traits.block_elements == 0,
                 "out: expected a multiple of {}'s block of {} values, got {} values", traits.name,
                 traits.block_elements, out.size());
  const std::size_t blocks = out.size() / traits.block_elements;
  VERL_CHECK_ARG(data.size() == blocks * traits.block_bytes, "data: {} values of {} take {} bytes, got {}",
                 out.size(), traits.name, blocks * traits.block_bytes, data.size());
  using namespace detail::gguf;
  const std::byte* in = data.data();
  float* values = out.data();
  auto each_block = [&](auto&& decode) {
    for (std::size_t b = 0; b < blocks; ++b) decode(in + b * traits.block_bytes, values + b * traits.block_elements);
  };
  switch (type) {
    case GgmlType::F32:
      if (!out.empty()) std::memcpy(values, in, out.size() * sizeof(float));
      return;
    case GgmlType::F16:
      for (std::size_t i = 0; i < out.size(); ++i) values[i] = load_f16(in + 2 * i);
      return;
    case GgmlType::BF16:
      for (std::size_t i = 0; i < out.size(); ++i) values[i] = bf16_bits_to_float(load_u16(in + 2 * i));
      return;
    case GgmlType::Q4_0: return each_block(dequantize_q4_0);
    case GgmlType::Q4_1: return each_block(dequantize_q4_1);
    case GgmlType::Q5_0: return each_block(dequantize_q5_0);
    case GgmlType::Q5_1: return each_block(dequantize_q5_1);
    case GgmlType::Q8_0: return each_block(dequantize_q8_0);
    case GgmlType::Q4_K: return each_block(dequantize_q45_k<false>);
    case GgmlType::Q5_K: return each_block(dequantize_q45_k<true>);
    case GgmlType::Q6_K: return each_block(dequantize_q6_k);
    default: break;
  }
  ::verl::detail::throw_not_implemented("ggml type {}: dequantization is not implemented", traits.name);
}

}  // namespace verl::model
