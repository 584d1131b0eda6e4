// Reader and checker for verl golden fixtures (the schema of tests/data/golden/README.md): lets
// a user's own tests compare a C++ result with verl's Python outputs under the case's tolerances.
// Needs nlohmann-json (Debian: nlohmann-json3-dev).
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::testing {

using json = nlohmann::json;

struct Tolerance {
  double rtol = 0;
  double atol = 0;
};

/// A tensor as stored in a fixture: shape, dtype and the flat row-major data as doubles
/// (float32 values round-trip exactly through double).
struct HostTensor {
  std::vector<Index> shape;
  std::string dtype;
  std::vector<double> data;

  Index numel() const { return static_cast<Index>(data.size()); }
  Index rank() const { return static_cast<Index>(shape.size()); }

  /// A rank-2 tensor as (d0, d1); rank 1 as one row (1, n); rank k>2 folds leading dims.
  template <class Scalar = float>
  RowMatrix<Scalar> matrix() const {
    Index rows = 1, cols = 1;
    if (!shape.empty()) {
      cols = shape.back();
      for (std::size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
    }
    RowMatrix<Scalar> m(rows, cols);
    for (Index i = 0; i < numel(); ++i) m.data()[i] = static_cast<Scalar>(data[static_cast<std::size_t>(i)]);
    return m;
  }
  template <class Scalar = float>
  Vector<Scalar> vector() const {
    Vector<Scalar> v(numel());
    for (Index i = 0; i < numel(); ++i) v[i] = static_cast<Scalar>(data[static_cast<std::size_t>(i)]);
    return v;
  }
  std::vector<std::int64_t> int64s() const {
    std::vector<std::int64_t> v(data.size());
    for (std::size_t i = 0; i < data.size(); ++i) v[i] = static_cast<std::int64_t>(data[i]);
    return v;
  }
};

namespace detail {
inline double json_number(const json& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    throw InvalidArgument(fmt::format("golden: expected a number or nan/inf, got string '{}'", s));
  }
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  return v.get<double>();
}
}  // namespace detail

inline bool is_tensor(const json& v) { return v.is_object() && v.contains("shape") && v.contains("data"); }

inline HostTensor parse_tensor(const json& v) {
  VERL_CHECK_ARG(is_tensor(v), "golden: expected a tensor object with shape/dtype/data, got {}", v.dump().substr(0, 80));
  HostTensor t;
  for (const auto& d : v.at("shape")) t.shape.push_back(d.get<Index>());
  t.dtype = v.value("dtype", "float32");
  t.data.reserve(v.at("data").size());
  for (const auto& x : v.at("data")) t.data.push_back(detail::json_number(x));
  return t;
}

/// One case of a fixture file.
class GoldenCase {
 public:
  explicit GoldenCase(const json& raw, std::string family) : raw_(&raw), family_(std::move(family)) {}

  const json& raw() const { return *raw_; }
  std::string name() const { return raw_->at("name").get<std::string>(); }
  std::string fn() const { return raw_->at("fn").get<std::string>(); }
  const std::string& family() const { return family_; }
  std::string registry_name() const { return raw_->value("registry_name", std::string{}); }
  const json& args() const { return raw_->at("args"); }
  const json& inputs() const { return raw_->at("inputs"); }
  const json& outputs() const { return raw_->at("outputs"); }

  bool has_arg(std::string_view key) const { return args().contains(key) && !args().at(std::string(key)).is_null(); }
  bool has_input(std::string_view key) const {
    return inputs().contains(key) && !inputs().at(std::string(key)).is_null();
  }
  HostTensor input_tensor(const std::string& key) const { return parse_tensor(inputs().at(key)); }

  bool raises() const { return raw_->contains("raises"); }
  std::string raises_message() const { return raw_->value("raises", std::string{}); }
  bool random() const { return raw_->value("random", false); }

  Tolerance tolerance() const { return {raw_->value("rtol", 0.0), raw_->value("atol", 0.0)}; }
  Tolerance grad_tolerance() const {
    return {raw_->value("grad_rtol", tolerance().rtol), raw_->value("grad_atol", tolerance().atol)};
  }
  /// Flat indices of elements sitting exactly on a kink (see "Ties at kinks").
  std::set<Index> grad_tie_indices() const {
    std::set<Index> ties;
    if (raw_->contains("grad_tie_index"))
      for (const auto& i : raw_->at("grad_tie_index")) ties.insert(i.get<Index>());
    return ties;
  }
  /// For random cases, only keys listed in deterministic_outputs are checked.
  bool output_is_checkable(std::string_view key) const {
    if (!outputs().contains(key)) return false;
    if (!random()) return true;
    if (!raw_->contains("deterministic_outputs")) return false;
    for (const auto& k : raw_->at("deterministic_outputs"))
      if (k.get<std::string>() == key) return true;
    return false;
  }

 private:
  const json* raw_;
  std::string family_;
};

/// A fixture file: its header and its cases.
class GoldenFile {
 public:
  static GoldenFile load(const std::string& path) {
    std::ifstream in(path);
    VERL_CHECK_ARG(in.good(), "golden: cannot open fixture file '{}'", path);
    GoldenFile f;
    f.path_ = path;
    f.doc_ = json::parse(in);
    VERL_CHECK_ARG(f.doc_.contains("cases"), "golden: '{}' has no \"cases\" array", path);
    f.family_ = f.doc_.value("family", std::string{});
    return f;
  }
  const std::string& path() const { return path_; }
  const std::string& family() const { return family_; }
  std::vector<GoldenCase> cases() const {
    std::vector<GoldenCase> out;
    for (const auto& c : doc_.at("cases")) out.emplace_back(c, family_);
    return out;
  }

 private:
  std::string path_;
  std::string family_;
  json doc_;
};

/// Accumulates comparisons for one case and remembers the worst violation.
class CaseCheck {
 public:
  explicit CaseCheck(const GoldenCase& c) : case_(&c) {}

  bool passed() const { return failures_ == 0; }
  int comparisons() const { return comparisons_; }
  const std::string& worst() const { return worst_message_; }
  double worst_excess() const { return worst_excess_; }

  /// Compares `got` element-wise with outputs[key] (a tensor, a list of numbers or a number) under `tol`.
  /// Elements whose flat index is in `skip` are not compared.
  template <class Derived>
  void tensor(const std::string& key, const Eigen::DenseBase<Derived>& got, Tolerance tol,
              const std::set<Index>& skip = {}) {
    if (!case_->output_is_checkable(key)) return;
    const json& want_json = case_->outputs().at(key);
    std::vector<double> want;
    if (is_tensor(want_json)) {
      const HostTensor t = parse_tensor(want_json);
      want = t.data;
      // float32 data is written as the shortest decimal of a float: read it back as that float.
      if (t.dtype == "float32")
        for (auto& w : want) w = static_cast<double>(static_cast<float>(w));
    } else if (want_json.is_array()) {  // a plain JSON list of numbers (e.g. controller values)
      for (const auto& x : want_json) want.push_back(detail::json_number(x));
    } else {
      want.push_back(detail::json_number(want_json));
    }
    ++comparisons_;
    if (static_cast<Index>(want.size()) != got.size()) {
      fail(key, fmt::format("{}: expected {} elements, got {}", key, want.size(), got.size()),
           std::numeric_limits<double>::infinity());
      return;
    }
    const Index cols = got.cols();
    for (Index flat = 0; flat < got.size(); ++flat) {
      if (skip.count(flat)) continue;
      const double g = static_cast<double>(got(flat / cols, flat % cols));
      compare_number(key, flat, g, want[static_cast<std::size_t>(flat)], tol);
    }
  }
  void tensor(const std::string& key, const std::vector<double>& got, Tolerance tol) {
    Eigen::Map<const Eigen::Matrix<double, 1, Eigen::Dynamic>> m(got.data(), static_cast<Index>(got.size()));
    tensor(key, m, tol);
  }

  void scalar(const std::string& key, double got, Tolerance tol) {
    if (!case_->output_is_checkable(key)) return;
    ++comparisons_;
    compare_number(key, -1, got, detail::json_number(case_->outputs().at(key)), tol);
  }

  /// outputs[key] as a plain JSON list of numbers (a Python list of floats: the KL controller's
  /// values, the learning-rate multipliers), compared element-wise under `tol`.
  void number_list(const std::string& key, const std::vector<double>& got, Tolerance tol) {
    if (!case_->output_is_checkable(key)) return;
    ++comparisons_;
    const json& want = case_->outputs().at(key);
    if (!want.is_array() || want.size() != got.size()) {
      fail(key, fmt::format("{}: expected {} values, got {}", key, want.is_array() ? want.size() : 1, got.size()));
      return;
    }
    for (std::size_t i = 0; i < got.size(); ++i)
      compare_number(key, static_cast<Index>(i), got[i], detail::json_number(want[i]), tol);
  }

  /// Exact comparison of any JSON value (strings, integers, booleans, null, lists).
  void exact(const std::string& key, const json& got) {
    if (!case_->output_is_checkable(key)) return;
    ++comparisons_;
    json want = case_->outputs().at(key);
    if (is_tensor(want)) want = want.at("data");
    if (!json_equal(got, want)) {
      fail(key, fmt::format("{}: expected {}, got {}", key, clip(want.dump()), clip(got.dump())),
           std::numeric_limits<double>::infinity());
    }
  }

  /// Records a failure that is not a numeric comparison (a missing output, a wrong exception).
  void fail(const std::string& key, const std::string& message, double excess = std::numeric_limits<double>::infinity()) {
    ++failures_;
    if (worst_message_.empty() || excess > worst_excess_) {
      worst_excess_ = excess;
      worst_message_ = message;
    }
    (void)key;
  }

 private:
  static std::string clip(std::string s) { return s.size() > 160 ? s.substr(0, 157) + "..." : s; }

  static bool json_equal(const json& a, const json& b) {
    if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
    if (a.is_array() && b.is_array()) {
      if (a.size() != b.size()) return false;
      for (std::size_t i = 0; i < a.size(); ++i)
        if (!json_equal(a[i], b[i])) return false;
      return true;
    }
    if (a.is_object() && b.is_object()) {
      if (a.size() != b.size()) return false;
      for (auto it = a.begin(); it != a.end(); ++it)
        if (!b.contains(it.key()) || !json_equal(it.value(), b.at(it.key()))) return false;
      return true;
    }
    return a == b;
  }

  void compare_number(const std::string& key, Index flat, double got, double want, Tolerance tol) {
    double excess = 0;
    if (std::isnan(want) || std::isnan(got)) {
      excess = (std::isnan(want) && std::isnan(got)) ? 0 : std::numeric_limits<double>::infinity();
    } else if (std::isinf(want) || std::isinf(got)) {
      excess = got == want ? 0 : std::numeric_limits<double>::infinity();
    } else {
      const double diff = std::abs(got - want);
      const double bound = tol.atol + tol.rtol * std::abs(want);
      excess = diff > bound ? diff - bound : 0;
      if (diff > bound) excess = std::max(excess, std::numeric_limits<double>::min());
    }
    if (excess > 0) {
      const std::string where = flat >= 0 ? fmt::format("{}[{}]", key, flat) : key;
      fail(key, fmt::format("{}: got {:.9g}, want {:.9g} (|diff| {:.3g}, allowed {:.3g})", where, got, want,
                            std::abs(got - want), tol.atol + tol.rtol * std::abs(want)),
           excess);
    }
  }

  const GoldenCase* case_;
  int failures_ = 0;
  int comparisons_ = 0;
  double worst_excess_ = 0;
  std::string worst_message_;
};

}  // namespace verl::testing
