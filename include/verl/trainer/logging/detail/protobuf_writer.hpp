// Just enough of the protocol-buffer wire format to write TensorBoard's Event and Summary
// messages: varints, 64-bit and 32-bit fixed fields, and length-delimited fields.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace verl::trainer::detail {

class ProtobufWriter {
 public:
  enum WireType : std::uint32_t { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };

  void varint_field(std::uint32_t field, std::uint64_t value) {
    key(field, varint);
    write_varint(value);
  }
  void int64_field(std::uint32_t field, std::int64_t value) { varint_field(field, static_cast<std::uint64_t>(value)); }
  void double_field(std::uint32_t field, double value) {
    key(field, fixed64);
    append_little_endian(std::bit_cast<std::uint64_t>(value), 8);
  }
  void float_field(std::uint32_t field, float value) {
    key(field, fixed32);
    append_little_endian(std::bit_cast<std::uint32_t>(value), 4);
  }
  void bytes_field(std::uint32_t field, std::string_view bytes) {
    key(field, length_delimited);
    write_varint(bytes.size());
    const auto* begin = reinterpret_cast<const std::byte*>(bytes.data());
    buffer_.insert(buffer_.end(), begin, begin + bytes.size());
  }
  void message_field(std::uint32_t field, const ProtobufWriter& message) {
    key(field, length_delimited);
    write_varint(message.buffer_.size());
    buffer_.insert(buffer_.end(), message.buffer_.begin(), message.buffer_.end());
  }

  [[nodiscard]] const std::vector<std::byte>& bytes() const { return buffer_; }

 private:
  void key(std::uint32_t field, WireType type) { write_varint((static_cast<std::uint64_t>(field) << 3) | type); }
  void write_varint(std::uint64_t value) {
    while (value >= 0x80) {
      buffer_.push_back(static_cast<std::byte>((value & 0x7F) | 0x80));
      value >>= 7;
    }
    buffer_.push_back(static_cast<std::byte>(value));
  }
  void append_little_endian(std::uint64_t value, int count) {
    for (int i = 0; i < count; ++i) buffer_.push_back(static_cast<std::byte>((value >> (8 * i)) & 0xFF));
  }

  std::vector<std::byte> buffer_;
};

}  // namespace verl::trainer::detail
