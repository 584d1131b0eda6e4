// CRC-32C (Castagnoli), the checksum TFRecord framing uses, and TensorFlow's "masked" form of it
// (rotated and offset so that a CRC stored inside checksummed data does not confuse readers).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace verl::trainer::detail {

inline constexpr std::array<std::uint32_t, 256> crc32c_table = [] {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;  // reflected polynomial
    table[i] = crc;
  }
  return table;
}();

constexpr std::uint32_t crc32c(std::span<const std::byte> bytes) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (const std::byte b : bytes) crc = crc32c_table[(crc ^ static_cast<std::uint32_t>(b)) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

constexpr std::uint32_t masked_crc32c(std::span<const std::byte> bytes) {
  const std::uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

}  // namespace verl::trainer::detail
