// DataProto: verl's batch container. Named tensors that share the batch dimension (row-major
// (batch, width) matrices of float32 or int64, like torch's (B, T) tensors), named non-tensor
// columns with one value per sample (verl's numpy object arrays: strings, integers, floats or
// JSON values), and a free-form meta_info dictionary. The operations are verl's: select,
// select_idxs, slice, pop, rename, union, chunk, split, concat, reorder, repeat (interleaved or
// tiled), and padding to a divisor of the batch size.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::data {

/// A tensor column: (batch, width) float32 or int64, row-major.
using TensorColumn = std::variant<MatrixF, MatrixI64>;
/// A non-tensor column: one value per sample.
using NonTensorColumn =
    std::variant<std::vector<std::string>, std::vector<std::int64_t>, std::vector<double>, std::vector<nlohmann::json>>;

namespace detail {

template <class T>
struct is_tensor_scalar : std::bool_constant<std::is_same_v<T, float> || std::is_same_v<T, std::int64_t>> {};

template <class T>
struct is_non_tensor_value
    : std::bool_constant<std::is_same_v<T, std::string> || std::is_same_v<T, std::int64_t> ||
                         std::is_same_v<T, double> || std::is_same_v<T, nlohmann::json>> {};

template <class T>
constexpr std::string_view element_type_name() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  if constexpr (std::is_same_v<T, double>) return "float64";
  if constexpr (std::is_same_v<T, std::string>) return "string";
  if constexpr (std::is_same_v<T, nlohmann::json>) return "json";
  return "?";
}

inline std::string_view tensor_type_name(const TensorColumn& column) {
  return std::holds_alternative<MatrixF>(column) ? "float32" : "int64";
}

inline std::string_view non_tensor_type_name(const NonTensorColumn& column) {
  return std::visit(
      [](const auto& values) { return element_type_name<typename std::decay_t<decltype(values)>::value_type>(); },
      column);
}

inline Index rows_of(const TensorColumn& column) {
  return std::visit([](const auto& m) { return m.rows(); }, column);
}

inline Index cols_of(const TensorColumn& column) {
  return std::visit([](const auto& m) { return m.cols(); }, column);
}

inline std::size_t size_of(const NonTensorColumn& column) {
  return std::visit([](const auto& values) { return values.size(); }, column);
}

/// Rows `indices` of `matrix`, in that order (one contiguous copy per row).
template <class Scalar>
RowMatrix<Scalar> gather_rows(const RowMatrix<Scalar>& matrix, std::span<const Index> indices) {
  RowMatrix<Scalar> out(static_cast<Index>(indices.size()), matrix.cols());
  const auto width = static_cast<std::size_t>(matrix.cols());
  for (std::size_t r = 0; r < indices.size(); ++r) {
    if (width != 0) std::memcpy(out.row(static_cast<Index>(r)).data(), matrix.row(indices[r]).data(), width * sizeof(Scalar));
  }
  return out;
}

template <class T>
std::vector<T> gather_values(const std::vector<T>& values, std::span<const Index> indices) {
  std::vector<T> out;
  out.reserve(indices.size());
  for (const Index i : indices) out.push_back(values[static_cast<std::size_t>(i)]);
  return out;
}

inline TensorColumn gather(const TensorColumn& column, std::span<const Index> indices) {
  return std::visit([&](const auto& m) -> TensorColumn { return gather_rows(m, indices); }, column);
}

inline NonTensorColumn gather(const NonTensorColumn& column, std::span<const Index> indices) {
  return std::visit([&](const auto& values) -> NonTensorColumn { return gather_values(values, indices); }, column);
}

inline bool equal(const TensorColumn& a, const TensorColumn& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& m) {
        const auto& other = std::get<std::decay_t<decltype(m)>>(b);
        return m.rows() == other.rows() && m.cols() == other.cols() && (m.array() == other.array()).all();
      },
      a);
}

inline std::vector<Index> iota(Index begin, Index end, Index step = 1) {
  std::vector<Index> out;
  if (step > 0) {
    for (Index i = begin; i < end; i += step) out.push_back(i);
  } else {
    for (Index i = begin; i > end; i += step) out.push_back(i);
  }
  return out;
}

inline std::string joined_keys(const auto& map) {
  std::vector<std::string_view> keys;
  for (const auto& [key, value] : map) keys.push_back(key);
  return keys.empty() ? std::string("none") : fmt::format("{}", fmt::join(keys, ", "));
}

}  // namespace detail

class DataProto {
 public:
  using TensorMap = std::map<std::string, TensorColumn, std::less<>>;
  using NonTensorMap = std::map<std::string, NonTensorColumn, std::less<>>;

  DataProto() = default;

  /// Number of samples (0 for an empty DataProto).
  [[nodiscard]] Index size() const { return batch_size_.value_or(0); }
  [[nodiscard]] bool empty() const { return size() == 0; }

  // ---- tensors ---------------------------------------------------------------------------
  /// Adds or replaces a tensor; its rows must match the batch size.
  template <class Scalar>
    requires detail::is_tensor_scalar<Scalar>::value
  DataProto& set(std::string name, RowMatrix<Scalar> tensor) {
    require_batch_size(name, tensor.rows());
    batch_.insert_or_assign(std::move(name), TensorColumn(std::move(tensor)));
    return *this;
  }
  template <class Derived>
  DataProto& set(std::string name, const Eigen::MatrixBase<Derived>& tensor) {
    using Scalar = typename Derived::Scalar;
    VERL_STATIC_ASSERT(detail::is_tensor_scalar<Scalar>::value, DATA_PROTO_TENSORS_ARE_FLOAT32_OR_INT64);
    if constexpr (detail::is_tensor_scalar<Scalar>::value) {
      return set(std::move(name), RowMatrix<Scalar>(tensor));
    } else {
      return *this;
    }
  }

  [[nodiscard]] bool has_tensor(std::string_view name) const { return batch_.find(name) != batch_.end(); }

  /// The tensor `name` as Scalar (float or std::int64_t); a missing key or another element type
  /// is an error naming the key and listing what the batch holds.
  template <class Scalar = float>
  [[nodiscard]] const RowMatrix<Scalar>& tensor(std::string_view name) const {
    return const_cast<DataProto&>(*this).template mutable_tensor<Scalar>(name);
  }
  template <class Scalar = float>
  [[nodiscard]] RowMatrix<Scalar>& mutable_tensor(std::string_view name) {
    const auto found = batch_.find(name);
    VERL_CHECK_ARG(found != batch_.end(), "batch['{}']: no such tensor (tensors: {})", name,
                   detail::joined_keys(batch_));
    auto* tensor = std::get_if<RowMatrix<Scalar>>(&found->second);
    VERL_CHECK_ARG(tensor != nullptr, "batch['{}']: expected a {} tensor, got {}", name,
                   detail::element_type_name<Scalar>(), detail::tensor_type_name(found->second));
    return *tensor;
  }
  [[nodiscard]] const TensorMap& tensors() const { return batch_; }

  // ---- non-tensor columns --------------------------------------------------------------
  template <class T>
    requires detail::is_non_tensor_value<T>::value
  DataProto& set_non_tensor(std::string name, std::vector<T> values) {
    require_batch_size(name, static_cast<Index>(values.size()));
    non_tensor_batch_.insert_or_assign(std::move(name), NonTensorColumn(std::move(values)));
    return *this;
  }
  [[nodiscard]] bool has_non_tensor(std::string_view name) const {
    return non_tensor_batch_.find(name) != non_tensor_batch_.end();
  }
  template <class T>
  [[nodiscard]] const std::vector<T>& non_tensor(std::string_view name) const {
    const auto found = non_tensor_batch_.find(name);
    VERL_CHECK_ARG(found != non_tensor_batch_.end(), "non_tensor_batch['{}']: no such column (columns: {})", name,
                   detail::joined_keys(non_tensor_batch_));
    const auto* values = std::get_if<std::vector<T>>(&found->second);
    VERL_CHECK_ARG(values != nullptr, "non_tensor_batch['{}']: expected {} values, got {}", name,
                   detail::element_type_name<T>(), detail::non_tensor_type_name(found->second));
    return *values;
  }
  [[nodiscard]] const NonTensorMap& non_tensors() const { return non_tensor_batch_; }

  // ---- meta_info -------------------------------------------------------------------------
  [[nodiscard]] nlohmann::json& meta_info() { return meta_info_; }
  [[nodiscard]] const nlohmann::json& meta_info() const { return meta_info_; }

  // ---- verl's operations -------------------------------------------------------------------
  /// The named tensors / columns / meta_info keys (nullopt keeps all of that kind).
  [[nodiscard]] DataProto select(const std::optional<std::vector<std::string>>& batch_keys,
                                 const std::optional<std::vector<std::string>>& non_tensor_keys = std::nullopt,
                                 const std::optional<std::vector<std::string>>& meta_info_keys = std::nullopt) const {
    DataProto out;
    out.batch_size_ = batch_size_;
    if (batch_keys) {
      for (const auto& key : *batch_keys) {
        const auto found = batch_.find(key);
        VERL_CHECK_ARG(found != batch_.end(), "batch_keys: '{}' is not a tensor of the batch (tensors: {})", key,
                       detail::joined_keys(batch_));
        out.batch_.emplace(key, found->second);
      }
    } else {
      out.batch_ = batch_;
    }
    if (non_tensor_keys) {
      // verl keeps the columns that are present (no error for absent ones).
      for (const auto& key : *non_tensor_keys) {
        if (const auto found = non_tensor_batch_.find(key); found != non_tensor_batch_.end())
          out.non_tensor_batch_.emplace(key, found->second);
      }
    } else {
      out.non_tensor_batch_ = non_tensor_batch_;
    }
    if (meta_info_keys) {
      out.meta_info_ = nlohmann::json::object();
      for (const auto& key : *meta_info_keys) {
        if (meta_info_.contains(key)) out.meta_info_[key] = meta_info_[key];
      }
    } else {
      out.meta_info_ = meta_info_;
    }
    return out;
  }

  /// The samples at `indices` (in that order; repeats allowed).
  [[nodiscard]] DataProto select_idxs(std::span<const Index> indices) const {
    for (std::size_t i = 0; i < indices.size(); ++i) {
      VERL_CHECK_ARG(indices[i] >= 0 && indices[i] < size(), "idxs[{}]: expected an index in [0, {}), got {}", i,
                     size(), indices[i]);
    }
    return gathered(indices);
  }
  /// The samples whose mask entry is true (a boolean mask of length size()).
  [[nodiscard]] DataProto select_mask(std::span<const bool> mask) const {
    VERL_CHECK_ARG(static_cast<Index>(mask.size()) == size(), "mask: expected length {} (the batch size), got {}",
                   size(), mask.size());
    std::vector<Index> indices;
    for (std::size_t i = 0; i < mask.size(); ++i)
      if (mask[i]) indices.push_back(static_cast<Index>(i));
    return gathered(indices);
  }

  /// Python's data[start:end:step] (negative bounds count from the end; bounds are clamped).
  [[nodiscard]] DataProto slice(std::optional<Index> start = std::nullopt, std::optional<Index> end = std::nullopt,
                                Index step = 1) const {
    VERL_CHECK_ARG(step != 0, "step: expected a non-zero slice step, got 0");
    const Index n = size();
    auto normalize = [n](Index value, Index low, Index high) {
      if (value < 0) value += n;
      return std::clamp(value, low, high);
    };
    const Index begin = start ? normalize(*start, step > 0 ? 0 : -1, step > 0 ? n : n - 1) : (step > 0 ? 0 : n - 1);
    const Index stop = end ? normalize(*end, step > 0 ? 0 : -1, step > 0 ? n : n - 1) : (step > 0 ? n : -1);
    const auto indices = detail::iota(begin, stop, step);
    return gathered(indices);
  }

  /// Removes the named entries and returns them as a new DataProto (every key must exist).
  DataProto pop(const std::vector<std::string>& batch_keys, const std::vector<std::string>& non_tensor_keys = {},
                const std::vector<std::string>& meta_info_keys = {}) {
    DataProto out;
    for (const auto& key : batch_keys) {
      const auto found = batch_.find(key);
      VERL_CHECK_ARG(found != batch_.end(), "batch_keys: '{}' is not a tensor of the batch (tensors: {})", key,
                     detail::joined_keys(batch_));
      out.batch_size_ = batch_size_;
      out.batch_.insert(batch_.extract(found));
    }
    for (const auto& key : non_tensor_keys) {
      const auto found = non_tensor_batch_.find(key);
      VERL_CHECK_ARG(found != non_tensor_batch_.end(),
                     "non_tensor_batch_keys: '{}' is not a column of the batch (columns: {})", key,
                     detail::joined_keys(non_tensor_batch_));
      out.batch_size_ = batch_size_;
      out.non_tensor_batch_.insert(non_tensor_batch_.extract(found));
    }
    for (const auto& key : meta_info_keys) {
      VERL_CHECK_ARG(meta_info_.contains(key), "meta_info_keys: '{}' is not in meta_info", key);
      out.meta_info_[key] = std::move(meta_info_[key]);
      meta_info_.erase(key);
    }
    refresh_batch_size();
    return out;
  }

  /// Renames tensors (verl renames only in the tensor batch).
  DataProto& rename(const std::vector<std::string>& old_keys, const std::vector<std::string>& new_keys) {
    VERL_CHECK_ARG(old_keys.size() == new_keys.size(),
                   "new_keys: expected as many keys as old_keys ({}), got {}", old_keys.size(), new_keys.size());
    for (std::size_t i = 0; i < old_keys.size(); ++i) {
      const auto found = batch_.find(old_keys[i]);
      VERL_CHECK_ARG(found != batch_.end(), "old_keys: '{}' is not a tensor of the batch (tensors: {})", old_keys[i],
                     detail::joined_keys(batch_));
      auto node = batch_.extract(found);
      node.key() = new_keys[i];
      batch_.insert(std::move(node));
    }
    return *this;
  }

  /// Adds `other`'s entries; shared keys must hold equal values and the batch sizes must agree.
  DataProto& union_with(const DataProto& other) {
    if (batch_size_ && other.batch_size_) {
      VERL_CHECK_ARG(*batch_size_ == *other.batch_size_, "other: expected batch size {}, got {}", *batch_size_,
                     *other.batch_size_);
    }
    for (const auto& [key, column] : other.batch_) {
      if (const auto found = batch_.find(key); found != batch_.end()) {
        VERL_CHECK_ARG(detail::equal(found->second, column), "other: tensor '{}' differs between the two batches",
                       key);
      } else {
        batch_.emplace(key, column);
      }
    }
    for (const auto& [key, column] : other.non_tensor_batch_) {
      if (const auto found = non_tensor_batch_.find(key); found != non_tensor_batch_.end()) {
        VERL_CHECK_ARG(found->second == column, "other: non-tensor column '{}' differs between the two batches", key);
      } else {
        non_tensor_batch_.emplace(key, column);
      }
    }
    if (other.meta_info_.is_object()) {
      for (const auto& [key, value] : other.meta_info_.items()) {
        if (meta_info_.contains(key)) {
          VERL_CHECK_ARG(meta_info_[key] == value, "other: meta_info['{}'] differs between the two batches", key);
        } else {
          meta_info_[key] = value;
        }
      }
    }
    if (!batch_size_) batch_size_ = other.batch_size_;
    return *this;
  }

  /// `chunks` equal parts (the batch size must be divisible, as verl requires without padding).
  [[nodiscard]] std::vector<DataProto> chunk(Index chunks) const {
    VERL_CHECK_ARG(chunks > 0, "chunks: expected a positive number of chunks, got {}", chunks);
    VERL_CHECK_ARG(size() % chunks == 0, "chunks: only equal chunks are supported, got batch size {} and {} chunks",
                   size(), chunks);
    const Index part = size() / chunks;
    std::vector<DataProto> out;
    out.reserve(static_cast<std::size_t>(chunks));
    for (Index c = 0; c < chunks; ++c) out.push_back(slice(c * part, (c + 1) * part));
    return out;
  }

  /// Consecutive parts of `split_size` samples (the last may be shorter).
  [[nodiscard]] std::vector<DataProto> split(Index split_size) const {
    VERL_CHECK_ARG(split_size > 0, "split_size: expected a positive size, got {}", split_size);
    std::vector<DataProto> out;
    for (Index begin = 0; begin < size(); begin += split_size) out.push_back(slice(begin, begin + split_size));
    return out;
  }

  /// Concatenation along the batch: every part must have the same tensors (types and widths) and
  /// columns. meta_info is merged; a "metrics" entry is gathered into a dict of lists as verl does.
  [[nodiscard]] static DataProto concat(std::span<const DataProto> parts) {
    DataProto out;
    if (parts.empty()) return out;
    const DataProto& first = parts.front();
    Index total = 0;
    for (std::size_t p = 0; p < parts.size(); ++p) {
      total += parts[p].size();
      VERL_CHECK_ARG(detail::joined_keys(parts[p].batch_) == detail::joined_keys(first.batch_),
                     "data[{}]: expected the tensors of data[0] ({}), got {}", p, detail::joined_keys(first.batch_),
                     detail::joined_keys(parts[p].batch_));
      VERL_CHECK_ARG(detail::joined_keys(parts[p].non_tensor_batch_) == detail::joined_keys(first.non_tensor_batch_),
                     "data[{}]: expected the non-tensor columns of data[0] ({}), got {}", p,
                     detail::joined_keys(first.non_tensor_batch_), detail::joined_keys(parts[p].non_tensor_batch_));
    }
    for (const auto& [key, column] : first.batch_) {
      out.batch_.emplace(key, std::visit(
                                  [&](const auto& m) -> TensorColumn {
                                    using M = std::decay_t<decltype(m)>;
                                    M joined(total, m.cols());
                                    Index row = 0;
                                    for (std::size_t p = 0; p < parts.size(); ++p) {
                                      const auto* piece = std::get_if<M>(&parts[p].batch_.find(key)->second);
                                      VERL_CHECK_ARG(piece != nullptr && piece->cols() == m.cols(),
                                                     "data[{}]: tensor '{}' must be {} with width {} as in data[0]", p,
                                                     key, detail::tensor_type_name(column), m.cols());
                                      joined.middleRows(row, piece->rows()) = *piece;
                                      row += piece->rows();
                                    }
                                    return joined;
                                  },
                                  column));
    }
    for (const auto& [key, column] : first.non_tensor_batch_) {
      out.non_tensor_batch_.emplace(key, std::visit(
                                             [&](const auto& values) -> NonTensorColumn {
                                               using V = std::decay_t<decltype(values)>;
                                               V joined;
                                               joined.reserve(static_cast<std::size_t>(total));
                                               for (std::size_t p = 0; p < parts.size(); ++p) {
                                                 const auto* piece =
                                                     std::get_if<V>(&parts[p].non_tensor_batch_.find(key)->second);
                                                 VERL_CHECK_ARG(piece != nullptr,
                                                                "data[{}]: column '{}' must hold {} values as in data[0]",
                                                                p, key, detail::non_tensor_type_name(column));
                                                 joined.insert(joined.end(), piece->begin(), piece->end());
                                               }
                                               return joined;
                                             },
                                             column));
    }
    out.meta_info_ = merge_meta_info(parts);
    if (!out.batch_.empty() || !out.non_tensor_batch_.empty()) out.batch_size_ = total;
    return out;
  }
  [[nodiscard]] static DataProto concat(std::initializer_list<DataProto> parts) {
    return concat(std::span<const DataProto>(parts.begin(), parts.size()));
  }

  /// Reorders the samples in place: sample i becomes the old sample indices[i].
  void reorder(std::span<const Index> indices) {
    VERL_CHECK_ARG(static_cast<Index>(indices.size()) == size(), "indices: expected {} indices (the batch size), got {}",
                   size(), indices.size());
    *this = select_idxs(indices);
  }

  /// Every sample `repeat_times` times: interleaved (a a b b, torch's repeat_interleave) or tiled
  /// (a b a b).
  [[nodiscard]] DataProto repeat(Index repeat_times = 2, bool interleave = true) const {
    VERL_CHECK_ARG(repeat_times > 0, "repeat_times: expected a positive count, got {}", repeat_times);
    std::vector<Index> indices;
    indices.reserve(static_cast<std::size_t>(size() * repeat_times));
    if (interleave) {
      for (Index i = 0; i < size(); ++i)
        for (Index r = 0; r < repeat_times; ++r) indices.push_back(i);
    } else {
      for (Index r = 0; r < repeat_times; ++r)
        for (Index i = 0; i < size(); ++i) indices.push_back(i);
    }
    return gathered(indices);
  }

  /// verl's pad_dataproto_to_divisor: appends copies of the leading samples until the size is a
  /// multiple of `divisor`; returns the number of samples added (undo with unpad()).
  Index pad_to_divisor(Index divisor) {
    VERL_CHECK_ARG(divisor > 0, "size_divisor: expected a positive divisor, got {}", divisor);
    if (size() == 0 || size() % divisor == 0) return 0;
    const Index pad = divisor - size() % divisor;
    std::vector<Index> indices = detail::iota(0, size());
    for (Index k = 0; k < pad; ++k) indices.push_back(k % size());
    *this = gathered(indices);
    return pad;
  }
  void unpad(Index pad_size) {
    VERL_CHECK_ARG(pad_size >= 0 && pad_size <= size(), "pad_size: expected a value in [0, {}], got {}", size(),
                   pad_size);
    if (pad_size > 0) *this = slice(0, size() - pad_size);
  }

 private:
  void require_batch_size(std::string_view name, Index rows) {
    // The first entry fixes the batch size; later ones must agree.
    if (!batch_size_ || (batch_.empty() && non_tensor_batch_.empty())) {
      batch_size_ = rows;
      return;
    }
    VERL_CHECK_ARG(rows == *batch_size_, "{}: expected {} rows (the batch size), got {}", name, *batch_size_, rows);
  }

  void refresh_batch_size() {
    if (batch_.empty() && non_tensor_batch_.empty()) batch_size_.reset();
  }

  [[nodiscard]] DataProto gathered(std::span<const Index> indices) const {
    DataProto out;
    for (const auto& [key, column] : batch_) out.batch_.emplace(key, detail::gather(column, indices));
    for (const auto& [key, column] : non_tensor_batch_) out.non_tensor_batch_.emplace(key, detail::gather(column, indices));
    out.meta_info_ = meta_info_;
    if (batch_size_) out.batch_size_ = static_cast<Index>(indices.size());
    return out;
  }

  static nlohmann::json merge_meta_info(std::span<const DataProto> parts) {
    nlohmann::json merged = nlohmann::json::object();
    nlohmann::json metrics = nlohmann::json::array();
    for (std::size_t p = 0; p < parts.size(); ++p) {
      if (!parts[p].meta_info_.is_object()) continue;
      for (const auto& [key, value] : parts[p].meta_info_.items()) {
        if (key == "metrics") {
          if (value.is_array()) {
            for (const auto& m : value) metrics.push_back(m);
          } else if (!value.is_null()) {
            metrics.push_back(value);
          }
        } else if (merged.contains(key)) {
          VERL_CHECK_ARG(merged[key] == value, "data[{}]: conflicting values for meta_info key '{}'", p, key);
        } else {
          merged[key] = value;
        }
      }
    }
    if (!metrics.empty()) {
      // A list of per-worker dicts becomes a dict of lists.
      nlohmann::json by_name = nlohmann::json::object();
      for (const auto& m : metrics) {
        if (!m.is_object()) continue;
        for (const auto& [name, value] : m.items()) by_name[name].push_back(value);
      }
      merged["metrics"] = std::move(by_name);
    }
    return merged;
  }

  std::optional<Index> batch_size_;
  TensorMap batch_;
  NonTensorMap non_tensor_batch_;
  nlohmann::json meta_info_ = nlohmann::json::object();
};

}  // namespace verl::data
