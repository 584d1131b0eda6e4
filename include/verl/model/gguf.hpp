// The GGUF file format (ggml / llama.cpp): our own reader.
//
// A file is, all little-endian:
//   "GGUF" | version u32 | tensor count u64 | metadata count u64
//   metadata: key (u64 length + UTF-8 bytes) | value type u32 | value   (arrays: element type u32,
//             count u64, elements)
//   tensor infos: name | dimension count u32 | dimensions u64 each (fastest-varying first) |
//                 ggml type u32 | offset u64 (from the start of the data section)
//   padding to `general.alignment` (default 32) | data section
// Versions 2 and 3 are read (3 only added a way to mark big-endian files, which are refused;
// version 1 used 32-bit counts and is refused). The whole header is validated when the file is
// opened: every length and count against the bytes left, every tensor's type, size and offset
// against the data section (aligned, inside the file, no two tensors overlapping). Corrupt input
// is a verl::InvalidArgument naming the file and the key or tensor, never a crash.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/file_io.hpp"
#include "verl/core/tensor.hpp"
#include "verl/model/detail/gguf_quants.hpp"

namespace verl::model {

static_assert(std::endian::native == std::endian::little,
              "GGUF files are read as little-endian; a big-endian host would need byte swaps");

/// The metadata value types of GGUF, with their ids.
enum class GgufValueType : std::uint32_t {
  uint8 = 0, int8 = 1, uint16 = 2, int16 = 3, uint32 = 4, int32 = 5, float32 = 6, boolean = 7,
  string = 8, array = 9, uint64 = 10, int64 = 11, float64 = 12,
};

constexpr std::string_view gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::uint8: return "UINT8";
    case GgufValueType::int8: return "INT8";
    case GgufValueType::uint16: return "UINT16";
    case GgufValueType::int16: return "INT16";
    case GgufValueType::uint32: return "UINT32";
    case GgufValueType::int32: return "INT32";
    case GgufValueType::float32: return "FLOAT32";
    case GgufValueType::boolean: return "BOOL";
    case GgufValueType::string: return "STRING";
    case GgufValueType::array: return "ARRAY";
    case GgufValueType::uint64: return "UINT64";
    case GgufValueType::int64: return "INT64";
    case GgufValueType::float64: return "FLOAT64";
  }
  return "?";
}

constexpr bool is_gguf_integer(GgufValueType type) {
  switch (type) {
    case GgufValueType::uint8: case GgufValueType::int8: case GgufValueType::uint16: case GgufValueType::int16:
    case GgufValueType::uint32: case GgufValueType::int32: case GgufValueType::uint64: case GgufValueType::int64:
      return true;
    default: return false;
  }
}
constexpr bool is_gguf_signed(GgufValueType type) {
  return type == GgufValueType::int8 || type == GgufValueType::int16 || type == GgufValueType::int32 ||
         type == GgufValueType::int64;
}

/// One metadata value. Integers are kept widened (unsigned in u64, signed in i64), floats in
/// double (a FLOAT32 converts back exactly); `type` says what the file stored.
struct GgufValue {
  GgufValueType type = GgufValueType::uint8;
  GgufValueType element_type = GgufValueType::uint8;  ///< arrays only
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string, std::vector<GgufValue>> data;

  [[nodiscard]] bool is_array() const { return type == GgufValueType::array; }
  /// "UINT32", or "ARRAY of STRING".
  [[nodiscard]] std::string type_name() const {
    return is_array() ? fmt::format("ARRAY of {}", gguf_value_type_name(element_type))
                      : std::string(gguf_value_type_name(type));
  }
};

/// A tensor's entry in the header. `dims` is ggml's order (fastest-varying first): a torch
/// (rows, cols) matrix is stored with dims {cols, rows}.
struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<std::uint64_t> dims;
  std::uint64_t offset = 0;      ///< from the start of the data section
  std::uint64_t size_bytes = 0;  ///< what its blocks occupy

  [[nodiscard]] std::uint64_t element_count() const {
    std::uint64_t count = 1;
    for (const auto dim : dims) count *= dim;
    return count;
  }
  /// The torch shape (dims reversed).
  [[nodiscard]] std::vector<std::int64_t> torch_shape() const {
    return {dims.rbegin(), dims.rend()};
  }
};

namespace detail::gguf {

inline std::string format_dims(std::span<const std::uint64_t> dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

/// A cursor over the header that refuses to read past the end, naming what it was reading.
class HeaderCursor {
 public:
  HeaderCursor(std::span<const std::byte> bytes, const std::string& source) : bytes_(bytes), source_(source) {}

  [[nodiscard]] std::size_t position() const { return position_; }
  [[nodiscard]] std::size_t remaining() const { return bytes_.size() - position_; }

  template <class T>
  T read(std::string_view what) {
    require(sizeof(T), what);
    T value;
    std::memcpy(&value, bytes_.data() + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }

  std::string read_string(std::string_view what) {
    const auto length = read<std::uint64_t>(what);
    if (length > remaining()) {
      fail("{}: a string of {} bytes at offset {}, but only {} bytes are left (truncated or corrupt)", what, length,
           position_ - 8, remaining());
    }
    std::string text(reinterpret_cast<const char*>(bytes_.data() + position_), static_cast<std::size_t>(length));
    position_ += static_cast<std::size_t>(length);
    return text;
  }

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw InvalidArgument(
        fmt::format("GGUF file '{}': {}", source_, fmt::format(format, std::forward<Args>(args)...)));
  }

 private:
  void require(std::size_t size, std::string_view what) const {
    if (size > remaining()) {
      fail("{}: needs {} bytes at offset {}, but the file ends after {} (truncated)", what, size, position_,
           bytes_.size());
    }
  }

  std::span<const std::byte> bytes_;
  const std::string& source_;
  std::size_t position_ = 0;
};

/// Bytes the smallest encoding of one value of `type` takes (bounds an array's count).
constexpr std::size_t min_value_bytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::uint8: case GgufValueType::int8: case GgufValueType::boolean: return 1;
    case GgufValueType::uint16: case GgufValueType::int16: return 2;
    case GgufValueType::uint32: case GgufValueType::int32: case GgufValueType::float32: return 4;
    case GgufValueType::uint64: case GgufValueType::int64: case GgufValueType::float64: return 8;
    case GgufValueType::string: return 8;
    case GgufValueType::array: return 12;
  }
  return 1;
}

constexpr bool is_known_value_type(std::uint32_t id) { return id <= static_cast<std::uint32_t>(GgufValueType::float64); }

/// Nested arrays deeper than this are refused (a corrupt file could otherwise recurse deeply).
inline constexpr int max_array_depth = 8;

inline GgufValue read_value(HeaderCursor& cursor, GgufValueType type, const std::string& key, int depth) {
  GgufValue value;
  value.type = type;
  switch (type) {
    case GgufValueType::uint8: value.data = std::uint64_t{cursor.read<std::uint8_t>(key)}; break;
    case GgufValueType::int8: value.data = std::int64_t{cursor.read<std::int8_t>(key)}; break;
    case GgufValueType::uint16: value.data = std::uint64_t{cursor.read<std::uint16_t>(key)}; break;
    case GgufValueType::int16: value.data = std::int64_t{cursor.read<std::int16_t>(key)}; break;
    case GgufValueType::uint32: value.data = std::uint64_t{cursor.read<std::uint32_t>(key)}; break;
    case GgufValueType::int32: value.data = std::int64_t{cursor.read<std::int32_t>(key)}; break;
    case GgufValueType::uint64: value.data = cursor.read<std::uint64_t>(key); break;
    case GgufValueType::int64: value.data = cursor.read<std::int64_t>(key); break;
    case GgufValueType::float32: value.data = double{cursor.read<float>(key)}; break;
    case GgufValueType::float64: value.data = cursor.read<double>(key); break;
    case GgufValueType::boolean: {
      const auto byte = cursor.read<std::uint8_t>(key);
      if (byte > 1) cursor.fail("key '{}': expected a BOOL of 0 or 1, got {}", key, byte);
      value.data = byte == 1;
      break;
    }
    case GgufValueType::string: value.data = cursor.read_string(key); break;
    case GgufValueType::array: {
      if (depth >= max_array_depth) cursor.fail("key '{}': arrays nested deeper than {}", key, max_array_depth);
      const auto element_id = cursor.read<std::uint32_t>(key);
      if (!is_known_value_type(element_id)) {
        cursor.fail("key '{}': unknown array element type id {} (expected 0-12)", key, element_id);
      }
      value.element_type = static_cast<GgufValueType>(element_id);
      const auto count = cursor.read<std::uint64_t>(key);
      if (count > cursor.remaining() / min_value_bytes(value.element_type)) {
        cursor.fail("key '{}': an array of {} {} values cannot fit in the {} bytes left (corrupt count)", key, count,
                    gguf_value_type_name(value.element_type), cursor.remaining());
      }
      std::vector<GgufValue> items;
      items.reserve(static_cast<std::size_t>(count));
      for (std::uint64_t i = 0; i < count; ++i) items.push_back(read_value(cursor, value.element_type, key, depth + 1));
      value.data = std::move(items);
      break;
    }
  }
  return value;
}

inline std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace detail::gguf

/// One GGUF file, mapped read-only and validated when opened.
class GgufFile {
 public:
  static constexpr std::uint32_t default_alignment = 32;
  /// ggml tensors have at most four dimensions.
  static constexpr std::uint32_t max_dims = 4;

  explicit GgufFile(const std::filesystem::path& path) : file_(path) { parse(); }

  /// A file image already in memory; `name` is used in error messages.
  static GgufFile from_bytes(std::vector<std::byte> bytes, std::string name = "<memory>") {
    return GgufFile(io::MappedFile(std::move(bytes), std::move(name)));
  }

  /// Whether `path` is a regular file that starts with the GGUF magic.
  static bool has_magic(const std::filesystem::path& path) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(path, error)) return false;
    const io::MappedFile file(path);
    const auto bytes = file.bytes();
    return bytes.size() >= 4 && std::memcmp(bytes.data(), "GGUF", 4) == 0;
  }

  [[nodiscard]] const std::filesystem::path& path() const { return file_.path(); }
  [[nodiscard]] const std::string& source() const { return *source_; }
  [[nodiscard]] std::uint32_t version() const { return version_; }
  [[nodiscard]] std::uint64_t alignment() const { return alignment_; }
  /// Where the data section starts in the file.
  [[nodiscard]] std::uint64_t data_offset() const { return data_offset_; }

  /// Metadata keys in sorted order.
  [[nodiscard]] const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  [[nodiscard]] const GgufValue* find(std::string_view key) const {
    const auto found = metadata_.find(key);
    return found == metadata_.end() ? nullptr : &found->second;
  }
  [[nodiscard]] bool contains(std::string_view key) const { return find(key) != nullptr; }

  /// A non-negative integer of any integer type; missing or ill-typed keys are errors.
  [[nodiscard]] std::uint64_t require_uint(std::string_view key) const { return as_uint(key, require(key)); }
  [[nodiscard]] std::optional<std::uint64_t> optional_uint(std::string_view key) const {
    const GgufValue* value = find(key);
    return value ? std::optional(as_uint(key, *value)) : std::nullopt;
  }
  /// A FLOAT32 or FLOAT64 value.
  [[nodiscard]] double require_float(std::string_view key) const { return as_float(key, require(key)); }
  [[nodiscard]] std::optional<double> optional_float(std::string_view key) const {
    const GgufValue* value = find(key);
    return value ? std::optional(as_float(key, *value)) : std::nullopt;
  }
  [[nodiscard]] const std::string& require_string(std::string_view key) const { return as_string(key, require(key)); }
  [[nodiscard]] std::optional<std::string> optional_string(std::string_view key) const {
    const GgufValue* value = find(key);
    return value ? std::optional(as_string(key, *value)) : std::nullopt;
  }
  [[nodiscard]] std::optional<bool> optional_bool(std::string_view key) const {
    const GgufValue* value = find(key);
    if (value == nullptr) return std::nullopt;
    expect_type(key, *value, value->type == GgufValueType::boolean, "BOOL");
    return std::get<bool>(value->data);
  }
  /// An ARRAY of STRING.
  [[nodiscard]] std::vector<std::string_view> require_string_array(std::string_view key) const {
    const GgufValue& value = require(key);
    expect_type(key, value, value.is_array() && value.element_type == GgufValueType::string, "ARRAY of STRING");
    std::vector<std::string_view> out;
    for (const auto& item : std::get<std::vector<GgufValue>>(value.data)) out.push_back(std::get<std::string>(item.data));
    return out;
  }
  /// An ARRAY of an integer type, widened to int64 (UINT64 values above INT64_MAX are errors).
  [[nodiscard]] std::vector<std::int64_t> require_int_array(std::string_view key) const {
    const GgufValue& value = require(key);
    expect_type(key, value, value.is_array() && is_gguf_integer(value.element_type), "ARRAY of an integer type");
    std::vector<std::int64_t> out;
    for (const auto& item : std::get<std::vector<GgufValue>>(value.data)) {
      if (const auto* u = std::get_if<std::uint64_t>(&item.data)) {
        if (*u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
          fail("key '{}': element {} = {} does not fit int64", key, out.size(), *u);
        }
        out.push_back(static_cast<std::int64_t>(*u));
      } else {
        out.push_back(std::get<std::int64_t>(item.data));
      }
    }
    return out;
  }

  [[nodiscard]] std::size_t size() const { return tensors_.size(); }
  /// Tensor infos in file order.
  [[nodiscard]] const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  [[nodiscard]] bool contains_tensor(std::string_view name) const { return index_.find(name) != index_.end(); }
  [[nodiscard]] const GgufTensorInfo& tensor(std::string_view name) const {
    const auto found = index_.find(name);
    if (found == index_.end()) fail("tensor '{}': not found ({} tensors)", name, tensors_.size());
    return tensors_[found->second];
  }
  /// The raw bytes of a tensor (its blocks).
  [[nodiscard]] std::span<const std::byte> tensor_bytes(std::string_view name) const {
    const GgufTensorInfo& info = tensor(name);
    return file_.bytes().subspan(static_cast<std::size_t>(data_offset_ + info.offset),
                                 static_cast<std::size_t>(info.size_bytes));
  }
  /// Every element of a tensor as float32, in ggml order (the row-major order of its torch shape).
  [[nodiscard]] std::vector<float> dequantize(std::string_view name) const {
    const GgufTensorInfo& info = tensor(name);
    if (!ggml_traits(info.type).dequantizable) {
      ::verl::detail::throw_not_implemented(
          "GGUF file '{}': tensor '{}': type {} cannot be converted to float32 (supported: F32, F16, BF16, Q8_0, "
          "Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)",
          *source_, name, ggml_type_name(info.type));
    }
    std::vector<float> out(static_cast<std::size_t>(info.element_count()));
    dequantize_to_f32(info.type, tensor_bytes(name), out);
    return out;
  }

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw InvalidArgument(fmt::format("GGUF file '{}': {}", *source_, fmt::format(format, std::forward<Args>(args)...)));
  }

 private:
  explicit GgufFile(io::MappedFile file) : file_(std::move(file)) { parse(); }

  const GgufValue& require(std::string_view key) const {
    const GgufValue* value = find(key);
    if (value == nullptr) fail("missing metadata key '{}'", key);
    return *value;
  }
  void expect_type(std::string_view key, const GgufValue& value, bool ok, std::string_view expected) const {
    if (!ok) fail("key '{}': expected {}, got {}", key, expected, value.type_name());
  }
  std::uint64_t as_uint(std::string_view key, const GgufValue& value) const {
    expect_type(key, value, is_gguf_integer(value.type), "an unsigned integer");
    if (const auto* s = std::get_if<std::int64_t>(&value.data)) {
      if (*s < 0) fail("key '{}': expected a non-negative integer, got {}", key, *s);
      return static_cast<std::uint64_t>(*s);
    }
    return std::get<std::uint64_t>(value.data);
  }
  double as_float(std::string_view key, const GgufValue& value) const {
    expect_type(key, value, value.type == GgufValueType::float32 || value.type == GgufValueType::float64,
                "FLOAT32 or FLOAT64");
    return std::get<double>(value.data);
  }
  const std::string& as_string(std::string_view key, const GgufValue& value) const {
    expect_type(key, value, value.type == GgufValueType::string, "STRING");
    return std::get<std::string>(value.data);
  }

  void parse() {
    source_ = std::make_unique<const std::string>(file_.path().string());
    const auto bytes = file_.bytes();
    detail::gguf::HeaderCursor cursor(bytes, *source_);
    const auto magic = cursor.read<std::uint32_t>("magic");
    if (std::memcmp(&magic, "GGUF", 4) != 0) {
      fail("expected the magic 'GGUF' in the first 4 bytes, got {:02X} {:02X} {:02X} {:02X}", magic & 0xFF,
           (magic >> 8) & 0xFF, (magic >> 16) & 0xFF, magic >> 24);
    }
    version_ = cursor.read<std::uint32_t>("version");
    if (version_ != 2 && version_ != 3) {
      const std::uint32_t swapped = (version_ >> 24) | ((version_ >> 8) & 0xFF00u) | ((version_ << 8) & 0xFF0000u) |
                                    (version_ << 24);
      if (version_ > 0xFFFF && swapped <= 3) {
        fail("version: the file is big-endian (version {} stored byte-swapped); only little-endian GGUF is read",
             swapped);
      }
      fail("version: expected 2 or 3, got {}{}", version_,
           version_ == 1 ? " (version 1's 32-bit counts are not read; convert the file again)" : "");
    }
    const auto tensor_count = cursor.read<std::uint64_t>("tensor count");
    const auto metadata_count = cursor.read<std::uint64_t>("metadata count");
    // Smallest encodings: a key/value is 8 + 4 + 1 bytes, a tensor info 8 + 4 + 4 + 8.
    if (metadata_count > cursor.remaining() / 13) {
      fail("metadata count: {} key/values cannot fit in the {} bytes left (corrupt count)", metadata_count,
           cursor.remaining());
    }
    if (tensor_count > cursor.remaining() / 24) {
      fail("tensor count: {} tensor infos cannot fit in the {} bytes left (corrupt count)", tensor_count,
           cursor.remaining());
    }
    for (std::uint64_t k = 0; k < metadata_count; ++k) {
      std::string key = cursor.read_string(fmt::format("metadata key {}", k));
      const auto type_id = cursor.read<std::uint32_t>(key);
      if (!detail::gguf::is_known_value_type(type_id)) {
        fail("key '{}': unknown value type id {} (expected 0-12)", key, type_id);
      }
      GgufValue value = detail::gguf::read_value(cursor, static_cast<GgufValueType>(type_id), key, 0);
      if (metadata_.contains(key)) fail("key '{}': appears twice", key);
      metadata_.emplace(std::move(key), std::move(value));
    }
    if (const GgufValue* alignment = find("general.alignment")) {
      expect_type("general.alignment", *alignment, alignment->type == GgufValueType::uint32, "UINT32");
      alignment_ = std::get<std::uint64_t>(alignment->data);
      if (alignment_ == 0 || !std::has_single_bit(alignment_)) {
        fail("key 'general.alignment': expected a power of two, got {}", alignment_);
      }
    }
    tensors_.reserve(static_cast<std::size_t>(tensor_count));
    for (std::uint64_t t = 0; t < tensor_count; ++t) read_tensor_info(cursor, t);
    data_offset_ = detail::gguf::align_up(cursor.position(), alignment_);
    if (tensors_.empty() && data_offset_ > bytes.size()) data_offset_ = bytes.size();  // no data section needed
    check_tensor_placement(bytes.size());
  }

  void read_tensor_info(detail::gguf::HeaderCursor& cursor, std::uint64_t t) {
    GgufTensorInfo info;
    info.name = cursor.read_string(fmt::format("tensor info {} name", t));
    const auto dim_count = cursor.read<std::uint32_t>(info.name);
    if (dim_count == 0 || dim_count > max_dims) {
      fail("tensor '{}': expected 1 to {} dimensions, got {}", info.name, max_dims, dim_count);
    }
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < dim_count; ++d) {
      const auto dim = cursor.read<std::uint64_t>(info.name);
      // 2^62 elements bounds every later product in bytes well below 2^64.
      if (dim == 0 || dim > (std::uint64_t{1} << 62) / elements) {
        fail("tensor '{}': dimension {} = {} is zero or makes the element count overflow", info.name, d, dim);
      }
      elements *= dim;
      info.dims.push_back(dim);
    }
    const auto type_id = cursor.read<std::uint32_t>(info.name);
    const auto traits = ggml_type_traits_of(type_id);
    if (!traits) fail("tensor '{}': unknown ggml type id {}", info.name, type_id);
    info.type = traits->type;
    if (info.dims[0] % traits->block_elements != 0) {
      fail("tensor '{}': first dimension {} is not a multiple of {}'s block of {} values", info.name, info.dims[0],
           traits->name, traits->block_elements);
    }
    info.size_bytes = elements / traits->block_elements * traits->block_bytes;
    info.offset = cursor.read<std::uint64_t>(info.name);
    if (info.offset % alignment_ != 0) {
      fail("tensor '{}': offset {} is not a multiple of the alignment {}", info.name, info.offset, alignment_);
    }
    if (index_.contains(info.name)) fail("tensor '{}': appears twice", info.name);
    index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  /// Every tensor lies inside the file, and no two overlap.
  void check_tensor_placement(std::uint64_t file_size) const {
    const std::uint64_t data_size = file_size >= data_offset_ ? file_size - data_offset_ : 0;
    if (!tensors_.empty() && data_offset_ > file_size) {
      fail("the data section should start at byte {}, but the file has only {} bytes (truncated)", data_offset_,
           file_size);
    }
    std::vector<const GgufTensorInfo*> ordered;
    ordered.reserve(tensors_.size());
    for (const auto& info : tensors_) {
      if (info.offset > data_size || info.size_bytes > data_size - info.offset) {
        fail("tensor '{}': {} {} bytes at data offset {} end past the data section's {} bytes (truncated file or "
             "lying offset)",
             info.name, detail::gguf::format_dims(info.dims), info.size_bytes, info.offset, data_size);
      }
      ordered.push_back(&info);
    }
    std::ranges::sort(ordered, [](const auto* a, const auto* b) { return a->offset < b->offset; });
    for (std::size_t i = 1; i < ordered.size(); ++i) {
      const auto* previous = ordered[i - 1];
      if (ordered[i]->offset < previous->offset + previous->size_bytes) {
        fail("tensor '{}': bytes [{}, {}) overlap tensor '{}' at [{}, {})", ordered[i]->name, ordered[i]->offset,
             ordered[i]->offset + ordered[i]->size_bytes, previous->name, previous->offset,
             previous->offset + previous->size_bytes);
      }
    }
  }

  io::MappedFile file_;
  std::unique_ptr<const std::string> source_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = default_alignment;
  std::uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

}  // namespace verl::model
