// GPT-2's reversible byte <-> character map: byte-level BPE vocabularies spell every byte as a
// printable character (printable Latin-1 bytes as themselves, the other 68 bytes as U+0100..).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "verl/tokenizer/detail/unicode.hpp"

namespace verl::tokenizer {

struct ByteLevelTables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<std::array<char, 2>, 256> byte_to_utf8{};  ///< the character's UTF-8 spelling
  std::array<std::uint8_t, 256> byte_to_utf8_length{};  ///< 1 or 2
  static constexpr char32_t max_char = 0x143;  ///< every mapped character is below U+0144
  std::array<std::int16_t, max_char + 1> char_to_byte{};  ///< -1 where a character is no byte

  ByteLevelTables() {
    char_to_byte.fill(-1);
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable(b) ? static_cast<char32_t>(b) : next_extra++;
      byte_to_char[static_cast<std::size_t>(b)] = cp;
      char_to_byte[cp] = static_cast<std::int16_t>(b);
      std::string spelled;
      detail::append_utf8(spelled, cp);
      byte_to_utf8_length[static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(spelled.size());
      for (std::size_t k = 0; k < spelled.size(); ++k) byte_to_utf8[static_cast<std::size_t>(b)][k] = spelled[k];
    }
  }

  /// The byte a character stands for, or -1.
  [[nodiscard]] int byte_of(char32_t cp) const { return cp <= max_char ? char_to_byte[cp] : -1; }

  /// Appends the byte-level spelling of raw `bytes`.
  void encode(std::string_view bytes, std::string& out) const {
    std::size_t at = out.size();
    out.resize(at + 2 * bytes.size());
    for (const char c : bytes) {
      const auto b = static_cast<unsigned char>(c);
      out[at] = byte_to_utf8[b][0];
      out[at + 1] = byte_to_utf8[b][1];
      at += byte_to_utf8_length[b];
    }
    out.resize(at);
  }

  /// Appends the bytes a token spells when every character is a byte character; returns false
  /// (appending nothing) otherwise.
  bool decode(std::string_view token, std::string& out) const {
    const std::size_t mark = out.size();
    std::size_t pos = 0;
    while (pos < token.size()) {
      const int byte = byte_of(detail::next_code_point(token, pos));
      if (byte < 0) {
        out.resize(mark);
        return false;
      }
      out.push_back(static_cast<char>(byte));
    }
    return true;
  }
};

inline const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace verl::tokenizer
