// The wire format of the HybridFlow runtime: how a worker method's arguments and results travel
// between the controller and the worker ranks. A value is written into a byte buffer and read
// back on the other side of an MPI message; DataProto (tensors, non-tensor columns, meta_info) is
// the main payload, as in verl, beside plain values (numbers, strings, vectors, maps, optionals,
// JSON, Eigen matrices, tuples).
//
// Every read is bounds-checked: a short or corrupt buffer is a WireError naming what was being
// read, never undefined behaviour. Numbers travel in the host's byte order (every rank of an MPI
// job runs the same binary on the same architecture).
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/data/data_proto.hpp"

namespace verl::hybridflow {

/// A message that cannot be read: truncated, or holding a value of another type.
class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An allocator whose resize() leaves new bytes uninitialised: a message buffer is always written
/// (or received into) right after it grows, and zeroing a large one first costs a pass over it.
template <class T>
struct UninitialisedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitialisedAllocator<U>;
  };
  UninitialisedAllocator() = default;
  template <class U>
  UninitialisedAllocator(const UninitialisedAllocator<U>&) noexcept {}  // NOLINT: allocator conversion
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;  // default-initialisation: no zeroing
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using Bytes = std::vector<std::byte, UninitialisedAllocator<std::byte>>;

/// Appends values to a byte buffer.
class WireWriter {
 public:
  void raw(const void* data, std::size_t size) {
    if (size == 0) return;
    const std::size_t old = buffer_.size();
    buffer_.resize(old + size);  // uninitialised growth, then one memcpy
    std::memcpy(buffer_.data() + old, data, size);
  }
  template <class T>
    requires std::is_trivially_copyable_v<T>
  void pod(const T& value) {
    raw(&value, sizeof(T));
  }
  void size(std::size_t n) { pod(static_cast<std::uint64_t>(n)); }

  [[nodiscard]] Bytes& buffer() { return buffer_; }
  [[nodiscard]] Bytes take() { return std::move(buffer_); }

 private:
  Bytes buffer_;
};

/// Reads values back from a byte buffer, in the order they were written.
class WireReader {
 public:
  explicit WireReader(std::span<const std::byte> data) : data_(data) {}

  void raw(void* out, std::size_t size, std::string_view what) {
    if (size > data_.size() - offset_)
      throw WireError(fmt::format("wire: truncated message reading {} ({} bytes wanted at offset {}, {} left)", what,
                                  size, offset_, data_.size() - offset_));
    if (size != 0) std::memcpy(out, data_.data() + offset_, size);
    offset_ += size;
  }
  template <class T>
    requires std::is_trivially_copyable_v<T>
  T pod(std::string_view what) {
    T value;
    raw(&value, sizeof(T), what);
    return value;
  }
  /// A count of elements of `element_bytes` each: never more than the bytes left could hold.
  std::size_t size(std::string_view what, std::size_t element_bytes = 1) {
    const auto n = pod<std::uint64_t>(what);
    const std::size_t left = data_.size() - offset_;
    if (element_bytes != 0 && n > left / element_bytes)
      throw WireError(fmt::format("wire: {} claims {} elements of {} bytes, but only {} bytes are left", what, n,
                                  element_bytes, left));
    return static_cast<std::size_t>(n);
  }
  [[nodiscard]] bool done() const { return offset_ == data_.size(); }
  [[nodiscard]] std::size_t remaining() const { return data_.size() - offset_; }

 private:
  std::span<const std::byte> data_;
  std::size_t offset_ = 0;
};

/// How a type is written and read: specialise for a type of your own (as the ones below do) to
/// pass it to or return it from a worker method.
template <class T, class Enable = void>
struct WireCodec;

/// A type that can cross the wire: a worker method's argument or result.
template <class T>
concept WireType = requires(WireWriter& w, WireReader& r, const T& value) {
  WireCodec<T>::write(w, value);
  { WireCodec<T>::read(r) } -> std::same_as<T>;
};

template <WireType T>
void write(WireWriter& w, const T& value) {
  WireCodec<T>::write(w, value);
}
template <WireType T>
T read(WireReader& r) {
  return WireCodec<T>::read(r);
}

/// One value as a buffer of its own, and back (the whole buffer must be consumed).
template <WireType T>
Bytes to_bytes(const T& value) {
  WireWriter w;
  write(w, value);
  return w.take();
}
template <WireType T>
T from_bytes(std::span<const std::byte> bytes) {
  WireReader r(bytes);
  T value = read<T>(r);
  if (!r.done()) throw WireError(fmt::format("wire: {} unread bytes after the value", r.remaining()));
  return value;
}

// ---- codecs ---------------------------------------------------------------------------------

template <class T>
struct WireCodec<T, std::enable_if_t<std::is_arithmetic_v<T> || std::is_enum_v<T>>> {
  static void write(WireWriter& w, T value) { w.pod(value); }
  static T read(WireReader& r) { return r.pod<T>("a number"); }
};

template <>
struct WireCodec<std::monostate> {
  static void write(WireWriter&, std::monostate) {}
  static std::monostate read(WireReader&) { return {}; }
};

template <>
struct WireCodec<std::string> {
  static void write(WireWriter& w, const std::string& s) {
    w.size(s.size());
    w.raw(s.data(), s.size());
  }
  static std::string read(WireReader& r) {
    std::string s(r.size("a string's length"), '\0');
    r.raw(s.data(), s.size(), "a string");
    return s;
  }
};

template <WireType T>
struct WireCodec<std::vector<T>> {
  static void write(WireWriter& w, const std::vector<T>& values) {
    w.size(values.size());
    if constexpr (std::is_arithmetic_v<T>) {
      w.raw(values.data(), values.size() * sizeof(T));
    } else {
      for (const auto& v : values) hybridflow::write(w, v);
    }
  }
  static std::vector<T> read(WireReader& r) {
    if constexpr (std::is_arithmetic_v<T>) {
      std::vector<T> values(r.size("a vector's length", sizeof(T)));
      r.raw(values.data(), values.size() * sizeof(T), "a vector's elements");
      return values;
    } else {
      const std::size_t n = r.size("a vector's length");
      std::vector<T> values;
      values.reserve(n);
      for (std::size_t i = 0; i < n; ++i) values.push_back(hybridflow::read<T>(r));
      return values;
    }
  }
};

template <WireType K, WireType V, class Compare>
struct WireCodec<std::map<K, V, Compare>> {
  static void write(WireWriter& w, const std::map<K, V, Compare>& map) {
    w.size(map.size());
    for (const auto& [k, v] : map) {
      hybridflow::write(w, k);
      hybridflow::write(w, v);
    }
  }
  static std::map<K, V, Compare> read(WireReader& r) {
    const std::size_t n = r.size("a map's size");
    std::map<K, V, Compare> map;
    for (std::size_t i = 0; i < n; ++i) {
      K key = hybridflow::read<K>(r);
      map.insert_or_assign(std::move(key), hybridflow::read<V>(r));
    }
    return map;
  }
};

template <WireType T>
struct WireCodec<std::optional<T>> {
  static void write(WireWriter& w, const std::optional<T>& value) {
    w.pod(static_cast<std::uint8_t>(value.has_value()));
    if (value) hybridflow::write(w, *value);
  }
  static std::optional<T> read(WireReader& r) {
    if (r.pod<std::uint8_t>("an optional's flag") == 0) return std::nullopt;
    return hybridflow::read<T>(r);
  }
};

template <WireType... Ts>
struct WireCodec<std::tuple<Ts...>> {
  static void write(WireWriter& w, const std::tuple<Ts...>& values) {
    std::apply([&](const auto&... v) { (hybridflow::write(w, v), ...); }, values);
  }
  static std::tuple<Ts...> read(WireReader& r) {
    // Braced initialisation evaluates left to right: the fields come back in order.
    return std::tuple<Ts...>{hybridflow::read<Ts>(r)...};
  }
};

template <WireType A, WireType B>
struct WireCodec<std::pair<A, B>> {
  static void write(WireWriter& w, const std::pair<A, B>& value) {
    hybridflow::write(w, value.first);
    hybridflow::write(w, value.second);
  }
  static std::pair<A, B> read(WireReader& r) {
    A first = hybridflow::read<A>(r);
    return {std::move(first), hybridflow::read<B>(r)};
  }
};

/// JSON travels as CBOR (compact, and exact for numbers).
template <>
struct WireCodec<nlohmann::json> {
  static void write(WireWriter& w, const nlohmann::json& value) {
    const std::vector<std::uint8_t> cbor = nlohmann::json::to_cbor(value);
    hybridflow::write(w, cbor);
  }
  static nlohmann::json read(WireReader& r) {
    const auto cbor = hybridflow::read<std::vector<std::uint8_t>>(r);
    try {
      return nlohmann::json::from_cbor(cbor);
    } catch (const nlohmann::json::exception& error) {
      throw WireError(fmt::format("wire: malformed JSON value ({})", error.what()));
    }
  }
};

/// Row-major Eigen matrices of numbers (the tensors of DataProto, and plain matrices).
template <class Scalar>
  requires std::is_arithmetic_v<Scalar>
struct WireCodec<RowMatrix<Scalar>> {
  static void write(WireWriter& w, const RowMatrix<Scalar>& m) {
    w.pod(static_cast<std::int64_t>(m.rows()));
    w.pod(static_cast<std::int64_t>(m.cols()));
    w.raw(m.data(), static_cast<std::size_t>(m.size()) * sizeof(Scalar));
  }
  static RowMatrix<Scalar> read(WireReader& r) {
    const auto rows = r.pod<std::int64_t>("a matrix's rows");
    const auto cols = r.pod<std::int64_t>("a matrix's columns");
    if (rows < 0 || cols < 0 || (cols != 0 && static_cast<std::uint64_t>(rows) >
                                                  r.remaining() / sizeof(Scalar) / static_cast<std::uint64_t>(cols)))
      throw WireError(fmt::format("wire: a {} x {} matrix does not fit in the {} bytes left", rows, cols, r.remaining()));
    RowMatrix<Scalar> m(rows, cols);
    r.raw(m.data(), static_cast<std::size_t>(m.size()) * sizeof(Scalar), "a matrix's elements");
    return m;
  }
};

template <class Scalar>
  requires std::is_arithmetic_v<Scalar>
struct WireCodec<Vector<Scalar>> {
  static void write(WireWriter& w, const Vector<Scalar>& v) {
    w.size(static_cast<std::size_t>(v.size()));
    w.raw(v.data(), static_cast<std::size_t>(v.size()) * sizeof(Scalar));
  }
  static Vector<Scalar> read(WireReader& r) {
    Vector<Scalar> v(static_cast<Index>(r.size("a vector's length", sizeof(Scalar))));
    r.raw(v.data(), static_cast<std::size_t>(v.size()) * sizeof(Scalar), "a vector's elements");
    return v;
  }
};

/// verl's DataProto: its tensors (float32 / int64), non-tensor columns and meta_info.
template <>
struct WireCodec<data::DataProto> {
  static void write(WireWriter& w, const data::DataProto& proto) {
    w.size(proto.tensors().size());
    for (const auto& [name, column] : proto.tensors()) {
      hybridflow::write(w, name);
      w.pod(static_cast<std::uint8_t>(column.index()));
      std::visit([&](const auto& m) { hybridflow::write(w, m); }, column);
    }
    w.size(proto.non_tensors().size());
    for (const auto& [name, column] : proto.non_tensors()) {
      hybridflow::write(w, name);
      w.pod(static_cast<std::uint8_t>(column.index()));
      std::visit([&](const auto& values) { hybridflow::write(w, values); }, column);
    }
    hybridflow::write(w, proto.meta_info());
  }

  static data::DataProto read(WireReader& r) {
    data::DataProto proto;
    const std::size_t tensors = r.size("DataProto's tensor count");
    for (std::size_t i = 0; i < tensors; ++i) {
      std::string name = hybridflow::read<std::string>(r);
      switch (r.pod<std::uint8_t>("a tensor's type")) {
        case 0: proto.set(std::move(name), hybridflow::read<MatrixF>(r)); break;
        case 1: proto.set(std::move(name), hybridflow::read<MatrixI64>(r)); break;
        default: throw WireError(fmt::format("wire: tensor '{}' has an unknown element type", name));
      }
    }
    const std::size_t columns = r.size("DataProto's column count");
    for (std::size_t i = 0; i < columns; ++i) {
      std::string name = hybridflow::read<std::string>(r);
      switch (r.pod<std::uint8_t>("a column's type")) {
        case 0: proto.set_non_tensor(std::move(name), hybridflow::read<std::vector<std::string>>(r)); break;
        case 1: proto.set_non_tensor(std::move(name), hybridflow::read<std::vector<std::int64_t>>(r)); break;
        case 2: proto.set_non_tensor(std::move(name), hybridflow::read<std::vector<double>>(r)); break;
        case 3: proto.set_non_tensor(std::move(name), hybridflow::read<std::vector<nlohmann::json>>(r)); break;
        default: throw WireError(fmt::format("wire: column '{}' has an unknown element type", name));
      }
    }
    proto.meta_info() = hybridflow::read<nlohmann::json>(r);
    return proto;
  }
};

static_assert(std::variant_size_v<data::TensorColumn> == 2, "the DataProto codec writes two tensor types");
static_assert(std::variant_size_v<data::NonTensorColumn> == 4, "the DataProto codec writes four column types");

}  // namespace verl::hybridflow
