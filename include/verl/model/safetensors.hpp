// The safetensors checkpoint format (Hugging Face): our own reader and writer.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// and a data section that the tensors tile exactly (offsets relative to its start, no holes, no
// overlaps). The reader maps the file once and validates the whole header up front, so every
// later access is a bounds-checked view; corrupt input is a verl::InvalidArgument naming the file
// and tensor, never a crash. Sharded checkpoints (`model.safetensors.index.json` with a
// weight_map) open every shard once. Writes are atomic (temporary file, fsync, rename).
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/core/file_io.hpp"
#include "verl/core/half_float.hpp"

namespace verl::model {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; a big-endian host would need byte swaps");

/// Element types of a safetensors tensor (the format's dtype strings).
enum class DType : std::uint8_t { BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64 };

inline constexpr std::array<DType, 13> all_dtypes = {DType::BOOL, DType::U8,  DType::I8,  DType::I16, DType::U16,
                                                     DType::F16,  DType::BF16, DType::I32, DType::U32, DType::F32,
                                                     DType::I64,  DType::U64, DType::F64};

/// The format's name of a dtype ("F32", "BF16", ...).
constexpr std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::BOOL: return "BOOL";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::I16: return "I16";
    case DType::U16: return "U16";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::U32: return "U32";
    case DType::F32: return "F32";
    case DType::I64: return "I64";
    case DType::U64: return "U64";
    case DType::F64: return "F64";
  }
  return "?";
}

/// Bytes per element.
constexpr std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::BOOL:
    case DType::U8:
    case DType::I8: return 1;
    case DType::I16:
    case DType::U16:
    case DType::F16:
    case DType::BF16: return 2;
    case DType::I32:
    case DType::U32:
    case DType::F32: return 4;
    case DType::I64:
    case DType::U64:
    case DType::F64: return 8;
  }
  return 0;
}

constexpr bool is_floating(DType dtype) {
  return dtype == DType::F16 || dtype == DType::BF16 || dtype == DType::F32 || dtype == DType::F64;
}

/// Parses a dtype string; nullopt for a name we do not read (e.g. the F8 variants).
constexpr std::optional<DType> parse_dtype(std::string_view name) {
  for (const DType dtype : all_dtypes) {
    if (dtype_name(dtype) == name) return dtype;
  }
  return std::nullopt;
}

namespace detail {

inline std::string format_shape(std::span<const std::int64_t> shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

/// Product of the dimensions, or nullopt on overflow past 2^62 elements.
inline std::optional<std::uint64_t> checked_element_count(std::span<const std::int64_t> shape) {
  std::uint64_t count = 1;
  for (const std::int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim != 0 && count > (std::uint64_t{1} << 62) / static_cast<std::uint64_t>(dim)) return std::nullopt;
    count *= static_cast<std::uint64_t>(dim);
  }
  return count;
}

template <class T>
T load_unaligned(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

/// out[i] = to_float(the i-th T at `source`), for `count` elements at any alignment.
template <class T, class ToFloat>
void convert_elements(const std::byte* source, std::size_t count, float* out, ToFloat to_float) {
  for (std::size_t i = 0; i < count; ++i) out[i] = to_float(load_unaligned<T>(source + sizeof(T) * i));
}

/// Converts `count` elements of `dtype` at `source` (any alignment) to float32.
inline void convert_to_f32(DType dtype, const std::byte* source, std::size_t count, float* out) {
  if (count == 0) return;  // empty tensors may come with null pointers
  const auto cast = [](auto value) { return static_cast<float>(value); };
  switch (dtype) {
    case DType::F32: std::memcpy(out, source, count * sizeof(float)); return;
    case DType::BF16: return convert_elements<std::uint16_t>(source, count, out, bf16_bits_to_float);
    case DType::F16: return convert_elements<std::uint16_t>(source, count, out, f16_bits_to_float);
    case DType::F64: return convert_elements<double>(source, count, out, cast);
    case DType::BOOL:
      return convert_elements<std::uint8_t>(source, count, out, [](std::uint8_t b) { return b != 0 ? 1.0f : 0.0f; });
    case DType::U8: return convert_elements<std::uint8_t>(source, count, out, cast);
    case DType::I8: return convert_elements<std::int8_t>(source, count, out, cast);
    case DType::I16: return convert_elements<std::int16_t>(source, count, out, cast);
    case DType::U16: return convert_elements<std::uint16_t>(source, count, out, cast);
    case DType::I32: return convert_elements<std::int32_t>(source, count, out, cast);
    case DType::U32: return convert_elements<std::uint32_t>(source, count, out, cast);
    case DType::I64: return convert_elements<std::int64_t>(source, count, out, cast);
    case DType::U64: return convert_elements<std::uint64_t>(source, count, out, cast);
  }
}

/// Narrows float32 values to `dtype` (rounding to nearest even for the 16-bit floats).
inline void convert_from_f32(DType dtype, const float* values, std::size_t count, std::byte* out) {
  if (count == 0 && is_floating(dtype)) return;
  auto store = [&](std::size_t i, auto value) { std::memcpy(out + i * sizeof(value), &value, sizeof(value)); };
  switch (dtype) {
    case DType::F32: std::memcpy(out, values, count * sizeof(float)); return;
    case DType::F64:
      for (std::size_t i = 0; i < count; ++i) store(i, static_cast<double>(values[i]));
      return;
    case DType::BF16:
      for (std::size_t i = 0; i < count; ++i) store(i, float_to_bf16_bits(values[i]));
      return;
    case DType::F16:
      for (std::size_t i = 0; i < count; ++i) store(i, float_to_f16_bits(values[i]));
      return;
    default:
      ::verl::detail::throw_invalid_argument("dtype: expected a floating dtype (F16, BF16, F32, F64) for float values, got {}",
                             dtype_name(dtype));
  }
}

}  // namespace detail

/// A tensor inside a mapped safetensors file: name, dtype, shape and its raw little-endian bytes.
/// Valid while the file object it came from lives.
struct TensorView {
  std::string_view name;
  DType dtype = DType::F32;
  std::span<const std::int64_t> shape;
  std::span<const std::byte> data;
  std::string_view source;  ///< the file, for error messages

  [[nodiscard]] std::size_t rank() const { return shape.size(); }
  [[nodiscard]] std::int64_t numel() const {
    std::int64_t count = 1;
    for (const auto dim : shape) count *= dim;
    return count;
  }

  /// Throws unless the shape is `expected` (checkpoint against config).
  void require_shape(std::span<const std::int64_t> expected) const {
    VERL_CHECK_ARG(std::ranges::equal(shape, expected), "tensor '{}' in '{}': expected shape {}, got {}", name, source,
                   detail::format_shape(expected), detail::format_shape(shape));
  }
  void require_shape(std::initializer_list<std::int64_t> expected) const {
    require_shape(std::span<const std::int64_t>(expected.begin(), expected.size()));
  }
  void require_dtype(DType expected) const {
    VERL_CHECK_ARG(dtype == expected, "tensor '{}' in '{}': expected dtype {}, got {}", name, source,
                   dtype_name(expected), dtype_name(dtype));
  }

  /// Every element widened (or, for I64/F64, rounded) to float32, in row-major order, into `out`.
  void copy_to_f32(std::span<float> out) const {
    VERL_CHECK_ARG(out.size() == static_cast<std::size_t>(numel()),
                   "out: expected {} floats for tensor '{}' in '{}', got {}", numel(), name, source, out.size());
    detail::convert_to_f32(dtype, data.data(), out.size(), out.data());
  }
  [[nodiscard]] std::vector<float> to_f32() const {
    std::vector<float> out(static_cast<std::size_t>(numel()));
    copy_to_f32(out);
    return out;
  }
  /// A rank-2 tensor as a (rows, cols) float32 matrix.
  [[nodiscard]] MatrixF to_matrix_f32() const {
    VERL_CHECK_ARG(rank() == 2, "tensor '{}' in '{}': expected a rank-2 tensor, got shape {}", name, source,
                   detail::format_shape(shape));
    MatrixF out(shape[0], shape[1]);
    copy_to_f32(std::span<float>(out.data(), static_cast<std::size_t>(out.size())));
    return out;
  }
  /// A rank-2 tensor of the given shape (rows, cols) as a float32 matrix.
  [[nodiscard]] MatrixF to_matrix_f32(Index rows, Index cols) const {
    require_shape({static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols)});
    return to_matrix_f32();
  }
  /// A rank-1 tensor as a float32 vector.
  [[nodiscard]] VectorF to_vector_f32() const {
    VERL_CHECK_ARG(rank() == 1, "tensor '{}' in '{}': expected a rank-1 tensor, got shape {}", name, source,
                   detail::format_shape(shape));
    VectorF out(shape[0]);
    copy_to_f32(std::span<float>(out.data(), static_cast<std::size_t>(out.size())));
    return out;
  }
  [[nodiscard]] VectorF to_vector_f32(Index size) const {
    require_shape({static_cast<std::int64_t>(size)});
    return to_vector_f32();
  }
  /// Integer (or BOOL) elements as int64; floating tensors are an error rather than a truncation.
  [[nodiscard]] std::vector<std::int64_t> to_i64() const {
    VERL_CHECK_ARG(!is_floating(dtype), "tensor '{}' in '{}': expected an integer dtype, got {}", name, source,
                   dtype_name(dtype));
    const auto count = static_cast<std::size_t>(numel());
    std::vector<std::int64_t> out(count);
    const std::byte* at = data.data();
    for (std::size_t i = 0; i < count; ++i) {
      switch (dtype) {
        case DType::BOOL: out[i] = detail::load_unaligned<std::uint8_t>(at + i) != 0; break;
        case DType::U8: out[i] = detail::load_unaligned<std::uint8_t>(at + i); break;
        case DType::I8: out[i] = detail::load_unaligned<std::int8_t>(at + i); break;
        case DType::I16: out[i] = detail::load_unaligned<std::int16_t>(at + 2 * i); break;
        case DType::U16: out[i] = detail::load_unaligned<std::uint16_t>(at + 2 * i); break;
        case DType::I32: out[i] = detail::load_unaligned<std::int32_t>(at + 4 * i); break;
        case DType::U32: out[i] = detail::load_unaligned<std::uint32_t>(at + 4 * i); break;
        case DType::I64: out[i] = detail::load_unaligned<std::int64_t>(at + 8 * i); break;
        case DType::U64: {
          const auto value = detail::load_unaligned<std::uint64_t>(at + 8 * i);
          VERL_CHECK_ARG(value <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
                         "tensor '{}' in '{}': element {} = {} does not fit int64", name, source, i, value);
          out[i] = static_cast<std::int64_t>(value);
          break;
        }
        default: break;
      }
    }
    return out;
  }
};

/// One safetensors file, mapped read-only and validated when opened.
/// The float32 conversions of a tensor source (a file, a folder of shards): Derived provides
/// `TensorView tensor(std::string_view name) const`.
template <class Derived>
class Float32Tensors {
 public:
  [[nodiscard]] MatrixF matrix_f32(std::string_view name) const { return self().tensor(name).to_matrix_f32(); }
  [[nodiscard]] MatrixF matrix_f32(std::string_view name, Index rows, Index cols) const {
    return self().tensor(name).to_matrix_f32(rows, cols);
  }
  [[nodiscard]] VectorF vector_f32(std::string_view name) const { return self().tensor(name).to_vector_f32(); }
  [[nodiscard]] VectorF vector_f32(std::string_view name, Index size) const {
    return self().tensor(name).to_vector_f32(size);
  }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

class SafetensorsFile : public Float32Tensors<SafetensorsFile> {
 public:
  /// Safetensors' own cap on the JSON header, which also bounds what a corrupt length can cost.
  static constexpr std::uint64_t max_header_bytes = 100'000'000;

  explicit SafetensorsFile(const std::filesystem::path& path) : file_(path) { parse(); }

  /// A file image already in memory; `name` is used in error messages.
  static SafetensorsFile from_bytes(std::vector<std::byte> bytes, std::string name = "<memory>") {
    return SafetensorsFile(io::MappedFile(std::move(bytes), std::move(name)));
  }

  [[nodiscard]] const std::filesystem::path& path() const { return file_.path(); }
  /// The `__metadata__` string map (e.g. {"format": "pt"}).
  [[nodiscard]] const std::map<std::string, std::string, std::less<>>& metadata() const { return metadata_; }
  [[nodiscard]] std::size_t size() const { return entries_.size(); }
  /// Tensor names in sorted order.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const auto& [name, entry] : entries_) out.push_back(name);
    return out;
  }
  [[nodiscard]] bool contains(std::string_view name) const { return entries_.find(name) != entries_.end(); }

  [[nodiscard]] TensorView tensor(std::string_view name) const {
    const auto found = entries_.find(name);
    VERL_CHECK_ARG(found != entries_.end(), "tensor '{}': not found in '{}' ({} tensors)", name, *source_,
                   entries_.size());
    return view(found->first, found->second);
  }

 private:
  struct Entry {
    DType dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t begin;
    std::uint64_t end;
  };

  explicit SafetensorsFile(io::MappedFile file) : file_(std::move(file)) { parse(); }

  [[nodiscard]] TensorView view(std::string_view name, const Entry& entry) const {
    const auto bytes = file_.bytes();
    return TensorView{name, entry.dtype, entry.shape,
                      bytes.subspan(data_start_ + entry.begin, entry.end - entry.begin), *source_};
  }

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw InvalidArgument(fmt::format("safetensors file '{}': {}", *source_,
                                      fmt::format(format, std::forward<Args>(args)...)));
  }

  void parse() {
    source_ = std::make_unique<const std::string>(file_.path().string());
    const auto bytes = file_.bytes();
    if (bytes.size() < 8) fail("truncated: {} bytes, expected at least 8 (the header length)", bytes.size());
    const auto header_length = detail::load_unaligned<std::uint64_t>(bytes.data());
    if (header_length > bytes.size() - 8) {
      fail("header length {} runs past the end of the file ({} bytes after the length field)", header_length,
           bytes.size() - 8);
    }
    if (header_length > max_header_bytes) fail("header length {} exceeds {} bytes", header_length, max_header_bytes);
    data_start_ = 8 + static_cast<std::size_t>(header_length);
    const auto* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
    const std::string_view header(header_begin, static_cast<std::size_t>(header_length));

    // Duplicate tensor names would make the file ambiguous; JSON parsers silently keep one.
    std::set<std::string, std::less<>> seen_keys;
    std::string duplicate;
    const auto detect_duplicates = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      if (event == nlohmann::json::parse_event_t::key && depth == 1 && duplicate.empty()) {
        if (!seen_keys.insert(parsed.get<std::string>()).second) duplicate = parsed.get<std::string>();
      }
      return true;
    };
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(header.begin(), header.end(), detect_duplicates);
    } catch (const nlohmann::json::exception& error) {
      fail("header is not valid JSON ({})", error.what());
    }
    if (!duplicate.empty()) fail("tensor '{}' appears twice in the header", duplicate);
    if (!json.is_object()) fail("header: expected a JSON object, got {}", json.type_name());

    const std::uint64_t data_size = bytes.size() - data_start_;
    for (auto& [key, value] : json.items()) {
      if (key == "__metadata__") {
        if (!value.is_object()) fail("__metadata__: expected an object of strings, got {}", value.type_name());
        for (auto& [meta_key, meta_value] : value.items()) {
          if (!meta_value.is_string()) {
            fail("__metadata__['{}']: expected a string, got {}", meta_key, meta_value.type_name());
          }
          metadata_.emplace(meta_key, meta_value.get<std::string>());
        }
        continue;
      }
      entries_.emplace(key, parse_entry(key, value, data_size));
    }
    check_tiling(data_size);
  }

  Entry parse_entry(const std::string& name, const nlohmann::json& value, std::uint64_t data_size) const {
    if (!value.is_object()) fail("tensor '{}': expected an object, got {}", name, value.type_name());
    const auto dtype_field = value.find("dtype");
    if (dtype_field == value.end() || !dtype_field->is_string()) fail("tensor '{}': missing string field 'dtype'", name);
    const auto dtype_string = dtype_field->get<std::string>();
    const auto dtype = parse_dtype(dtype_string);
    if (!dtype) {
      fail("tensor '{}': unknown dtype '{}' (expected one of BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, I64, "
           "U64, F64)",
           name, dtype_string);
    }
    const auto shape_field = value.find("shape");
    if (shape_field == value.end() || !shape_field->is_array()) fail("tensor '{}': missing array field 'shape'", name);
    Entry entry{*dtype, {}, 0, 0};
    for (const auto& dim : *shape_field) {
      if (!dim.is_number_integer() || (dim.is_number_integer() && !dim.is_number_unsigned() && dim.get<std::int64_t>() < 0)) {
        fail("tensor '{}': shape entries must be non-negative integers, got {}", name, shape_field->dump());
      }
      if (dim.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        fail("tensor '{}': shape entry {} is too large", name, dim.dump());
      }
      entry.shape.push_back(dim.get<std::int64_t>());
    }
    const auto offsets_field = value.find("data_offsets");
    if (offsets_field == value.end() || !offsets_field->is_array() || offsets_field->size() != 2 ||
        !(*offsets_field)[0].is_number_unsigned() || !(*offsets_field)[1].is_number_unsigned()) {
      fail("tensor '{}': expected 'data_offsets' = [begin, end] of non-negative integers, got {}", name,
           offsets_field == value.end() ? std::string("nothing") : offsets_field->dump());
    }
    entry.begin = (*offsets_field)[0].get<std::uint64_t>();
    entry.end = (*offsets_field)[1].get<std::uint64_t>();
    if (entry.end < entry.begin) fail("tensor '{}': data_offsets [{}, {}] end before they begin", name, entry.begin, entry.end);
    if (entry.end > data_size) {
      fail("tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes)", name, entry.begin, entry.end,
           data_size);
    }
    const auto count = detail::checked_element_count(entry.shape);
    if (!count || *count > (std::uint64_t{1} << 62) / dtype_size(entry.dtype) ||
        *count * dtype_size(entry.dtype) != entry.end - entry.begin) {
      fail("tensor '{}': shape {} of {} needs {} bytes, but data_offsets [{}, {}] hold {}", name,
           detail::format_shape(entry.shape), dtype_name(entry.dtype),
           count ? fmt::format("{}", *count * dtype_size(entry.dtype)) : std::string("too many"), entry.begin,
           entry.end, entry.end - entry.begin);
    }
    return entry;
  }

  /// The tensors must tile the data section: sorted by offset, each begins where the previous ends.
  void check_tiling(std::uint64_t data_size) const {
    std::vector<std::pair<const std::string*, const Entry*>> ordered;
    ordered.reserve(entries_.size());
    for (const auto& [name, entry] : entries_) ordered.emplace_back(&name, &entry);
    std::ranges::sort(ordered, [](const auto& a, const auto& b) {
      return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
    });
    std::uint64_t expected_begin = 0;
    const std::string* previous = nullptr;
    for (const auto& [name, entry] : ordered) {
      if (entry->begin < expected_begin) {
        fail("tensor '{}': data_offsets [{}, {}] overlap tensor '{}' (which ends at {})", *name, entry->begin,
             entry->end, previous ? *previous : std::string(), expected_begin);
      }
      if (entry->begin > expected_begin) {
        fail("tensor '{}': data_offsets [{}, {}] leave a hole at bytes [{}, {}) of the data section", *name,
             entry->begin, entry->end, expected_begin, entry->begin);
      }
      expected_begin = entry->end;
      previous = name;
    }
    if (expected_begin != data_size) {
      fail("the tensors cover {} bytes, but the data section has {} (truncated or trailing bytes)", expected_begin,
           data_size);
    }
  }

  io::MappedFile file_;
  std::unique_ptr<const std::string> source_;  // stable across moves: views point into it
  std::map<std::string, Entry, std::less<>> entries_;
  std::map<std::string, std::string, std::less<>> metadata_;
  std::size_t data_start_ = 0;
};

/// Collects named tensors and writes them as one safetensors file or as a sharded checkpoint.
/// Tensors are laid out in name order; the header is padded with spaces to 8 bytes so that every
/// tensor's data is 8-byte aligned in the file.
class SafetensorsWriter {
 public:
  void set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

  /// Adds a tensor from raw little-endian bytes (copied).
  void add(std::string name, DType dtype, std::vector<std::int64_t> shape, std::span<const std::byte> data) {
    VERL_CHECK_ARG(!name.empty() && name != "__metadata__", "name: expected a tensor name, got '{}'", name);
    VERL_CHECK_ARG(!tensors_.contains(name), "name: tensor '{}' was already added", name);
    const auto count = detail::checked_element_count(shape);
    VERL_CHECK_ARG(count.has_value(), "shape: expected non-negative dimensions for tensor '{}', got {}", name,
                   detail::format_shape(shape));
    VERL_CHECK_ARG(*count * dtype_size(dtype) == data.size(),
                   "data: tensor '{}' of shape {} and dtype {} needs {} bytes, got {}", name,
                   detail::format_shape(shape), dtype_name(dtype), *count * dtype_size(dtype), data.size());
    tensors_.emplace(std::move(name), Tensor{dtype, std::move(shape), std::vector<std::byte>(data.begin(), data.end())});
  }

  /// Adds float32 values (row-major) of any rank, stored as `dtype` (F32, F64, F16 or BF16).
  void add_f32(std::string name, std::vector<std::int64_t> shape, std::span<const float> values,
               DType dtype = DType::F32) {
    const auto count = detail::checked_element_count(shape);
    VERL_CHECK_ARG(count.has_value() && *count == values.size(),
                   "values: tensor '{}' of shape {} needs {} values, got {}", name, detail::format_shape(shape),
                   count.value_or(0), values.size());
    std::vector<std::byte> bytes(values.size() * dtype_size(dtype));
    detail::convert_from_f32(dtype, values.data(), values.size(), bytes.data());
    add(std::move(name), dtype, std::move(shape), bytes);
  }

  /// Adds a matrix as a rank-2 tensor (rows, cols).
  template <class Derived>
  void add_matrix(std::string name, const Eigen::MatrixBase<Derived>& values, DType dtype = DType::F32) {
    const MatrixF row_major = values.template cast<float>();
    add_f32(std::move(name), {static_cast<std::int64_t>(row_major.rows()), static_cast<std::int64_t>(row_major.cols())},
            std::span<const float>(row_major.data(), static_cast<std::size_t>(row_major.size())), dtype);
  }

  /// Adds a vector (either orientation) as a rank-1 tensor.
  template <class Derived>
  void add_vector(std::string name, const Eigen::MatrixBase<Derived>& values, DType dtype = DType::F32) {
    const VectorF flat = values.template cast<float>().reshaped();
    add_f32(std::move(name), {static_cast<std::int64_t>(flat.size())},
            std::span<const float>(flat.data(), static_cast<std::size_t>(flat.size())), dtype);
  }

  /// Adds int64 values of any rank (stored as I64).
  void add_i64(std::string name, std::vector<std::int64_t> shape, std::span<const std::int64_t> values) {
    add(std::move(name), DType::I64, std::move(shape), std::as_bytes(values));
  }

  [[nodiscard]] std::size_t size() const { return tensors_.size(); }
  [[nodiscard]] std::uint64_t tensor_bytes() const {
    std::uint64_t total = 0;
    for (const auto& [name, tensor] : tensors_) total += tensor.bytes.size();
    return total;
  }

  /// The whole file image.
  [[nodiscard]] std::vector<std::byte> serialize() const {
    const auto names = all_names();
    const std::string header = header_for(names);
    std::vector<std::byte> out;
    out.reserve(8 + header.size() + tensor_bytes());
    append_prefix(out, header);
    for (const auto* name : names) {
      const auto& bytes = tensors_.find(*name)->second.bytes;
      out.insert(out.end(), bytes.begin(), bytes.end());
    }
    return out;
  }

  /// Writes one file atomically.
  void write(const std::filesystem::path& path) const { write_subset(path, all_names()); }

  /// Writes a Hugging Face checkpoint into `folder`: `model.safetensors` when everything fits in
  /// `max_shard_bytes`, else `model-0000k-of-0000n.safetensors` shards plus
  /// `model.safetensors.index.json`. Tensors keep name order across shards; one larger than the
  /// limit gets a shard of its own. Returns the files written.
  std::vector<std::filesystem::path> write_sharded(const std::filesystem::path& folder,
                                                   std::uint64_t max_shard_bytes) const {
    VERL_CHECK_ARG(max_shard_bytes > 0, "max_shard_bytes: expected > 0, got {}", max_shard_bytes);
    std::filesystem::create_directories(folder);
    std::vector<std::vector<const std::string*>> shards(1);
    std::uint64_t shard_bytes = 0;
    for (const auto* name : all_names()) {
      const auto bytes = tensors_.find(*name)->second.bytes.size();
      if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
        shards.emplace_back();
        shard_bytes = 0;
      }
      shards.back().push_back(name);
      shard_bytes += bytes;
    }
    if (shards.size() == 1) {
      const auto path = folder / "model.safetensors";
      write_subset(path, shards.front());
      return {path};
    }
    std::vector<std::filesystem::path> written;
    nlohmann::json weight_map = nlohmann::json::object();
    for (std::size_t k = 0; k < shards.size(); ++k) {
      const auto file_name = fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
      write_subset(folder / file_name, shards[k]);
      written.push_back(folder / file_name);
      for (const auto* name : shards[k]) weight_map[*name] = file_name;
    }
    const nlohmann::json index = {{"metadata", {{"total_size", tensor_bytes()}}}, {"weight_map", weight_map}};
    const auto index_path = folder / "model.safetensors.index.json";
    io::write_file_atomically(index_path, index.dump(2) + "\n");
    written.push_back(index_path);
    return written;
  }

 private:
  struct Tensor {
    DType dtype;
    std::vector<std::int64_t> shape;
    std::vector<std::byte> bytes;
  };

  [[nodiscard]] std::vector<const std::string*> all_names() const {
    std::vector<const std::string*> names;
    names.reserve(tensors_.size());
    for (const auto& [name, tensor] : tensors_) names.push_back(&name);
    return names;
  }

  [[nodiscard]] std::string header_for(std::span<const std::string* const> names) const {
    nlohmann::json header = nlohmann::json::object();
    if (!metadata_.empty()) header["__metadata__"] = metadata_;
    std::uint64_t offset = 0;
    for (const auto* name : names) {
      const auto& tensor = tensors_.find(*name)->second;
      header[*name] = {{"dtype", std::string(dtype_name(tensor.dtype))},
                       {"shape", tensor.shape},
                       {"data_offsets", {offset, offset + tensor.bytes.size()}}};
      offset += tensor.bytes.size();
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    return text;
  }

  static void append_prefix(std::vector<std::byte>& out, const std::string& header) {
    const std::uint64_t length = header.size();
    const std::size_t at = out.size();
    out.resize(at + 8 + header.size());
    std::memcpy(out.data() + at, &length, 8);
    std::memcpy(out.data() + at + 8, header.data(), header.size());
  }

  void write_subset(const std::filesystem::path& path, std::span<const std::string* const> names) const {
    const std::string header = header_for(names);
    std::vector<std::byte> prefix;
    append_prefix(prefix, header);
    // Tensor bytes are written from where they are, without assembling the file in memory.
    std::vector<std::span<const std::byte>> chunks;
    chunks.reserve(names.size() + 1);
    chunks.emplace_back(prefix);
    for (const auto* name : names) chunks.emplace_back(tensors_.find(*name)->second.bytes);
    io::write_file_atomically(path, chunks);
  }

  std::map<std::string, Tensor, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// A Hugging Face model's weights: a single `model.safetensors` or shards listed by
/// `model.safetensors.index.json`. Every shard is opened (mapped) once.
class SafetensorsCheckpoint : public Float32Tensors<SafetensorsCheckpoint> {
 public:
  static constexpr std::string_view single_file_name = "model.safetensors";
  static constexpr std::string_view index_file_name = "model.safetensors.index.json";

  /// `path` is a model folder, a `.safetensors` file or an index JSON file. A folder with both a
  /// single `model.safetensors` and an index (a model re-saved unsharded over a sharded one) is
  /// read from the single file, as transformers reads it.
  explicit SafetensorsCheckpoint(const std::filesystem::path& path) {
    namespace fs = std::filesystem;
    if (fs::is_directory(path)) {
      if (fs::exists(path / single_file_name)) {
        open_single(path / single_file_name);
      } else if (fs::exists(path / index_file_name)) {
        open_index(path / index_file_name);
      } else {
        ::verl::detail::throw_invalid_argument("path: expected '{}' or '{}' in folder '{}', found neither", single_file_name,
                                       index_file_name, path.string());
      }
    } else if (path.extension() == ".json") {
      open_index(path);
    } else {
      open_single(path);
    }
  }

  [[nodiscard]] std::size_t shard_count() const { return shards_.size(); }
  [[nodiscard]] const SafetensorsFile& shard(std::size_t k) const { return shards_.at(k); }
  [[nodiscard]] std::size_t size() const { return shard_of_.size(); }
  [[nodiscard]] bool contains(std::string_view name) const { return shard_of_.find(name) != shard_of_.end(); }
  /// Tensor names in sorted order.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(shard_of_.size());
    for (const auto& [name, shard] : shard_of_) out.push_back(name);
    return out;
  }
  /// The file holding a tensor.
  [[nodiscard]] const std::filesystem::path& file_of(std::string_view name) const {
    return shards_[locate(name)].path();
  }

  [[nodiscard]] TensorView tensor(std::string_view name) const { return shards_[locate(name)].tensor(name); }

 private:
  std::size_t locate(std::string_view name) const {
    const auto found = shard_of_.find(name);
    VERL_CHECK_ARG(found != shard_of_.end(), "tensor '{}': not found in checkpoint '{}' ({} tensors)", name,
                   origin_.string(), shard_of_.size());
    return found->second;
  }

  void open_single(const std::filesystem::path& file) {
    origin_ = file;
    shards_.emplace_back(file);
    for (auto& name : shards_.front().names()) shard_of_.emplace(std::move(name), 0);
  }

  void open_index(const std::filesystem::path& index_path) {
    origin_ = index_path;
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(io::read_text_file(index_path));
    } catch (const nlohmann::json::exception& error) {
      ::verl::detail::throw_invalid_argument("index '{}': not valid JSON ({})", index_path.string(), error.what());
    }
    VERL_CHECK_ARG(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
                   "index '{}': expected an object with a 'weight_map' object", index_path.string());
    std::map<std::string, std::size_t, std::less<>> shard_index;
    for (const auto& [tensor_name, file_name] : index["weight_map"].items()) {
      VERL_CHECK_ARG(file_name.is_string(), "index '{}': weight_map['{}']: expected a file name, got {}",
                     index_path.string(), tensor_name, file_name.dump());
      const auto relative = std::filesystem::path(file_name.get<std::string>());
      // Shards live beside the index; anything else is a corrupt or hostile index.
      VERL_CHECK_ARG(relative.has_filename() && relative == relative.filename() && relative != ".." && relative != ".",
                     "index '{}': weight_map['{}']: expected a file name in the same folder, got '{}'",
                     index_path.string(), tensor_name, relative.string());
      auto [slot, inserted] = shard_index.emplace(relative.string(), shards_.size());
      if (inserted) shards_.emplace_back(index_path.parent_path() / relative);
      const auto& shard = shards_[slot->second];
      VERL_CHECK_ARG(shard.contains(tensor_name), "tensor '{}': listed in '{}' for shard '{}', which lacks it",
                     tensor_name, index_path.string(), shard.path().string());
      shard_of_.emplace(tensor_name, slot->second);
    }
  }

  std::filesystem::path origin_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, std::size_t, std::less<>> shard_of_;
};

}  // namespace verl::model
