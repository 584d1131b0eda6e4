// Values of the Jinja engine, with the Python semantics jinja2 gives them: None, bool, int, float,
// str, list/tuple, dict (insertion-ordered), jinja2's Undefined, namespace() objects and
// callables (macros, built-in functions, bound methods). Lists and dicts are immutable once built
// (transformers renders in jinja2's ImmutableSandboxedEnvironment), so they are shared, not copied.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "verl/core/error.hpp"

namespace verl::tokenizer::jinja {

class Value;

/// jinja2's Undefined: what a missing variable, key, attribute or index evaluates to. It renders
/// as "" and is falsy; `hint` is the UndefinedError message raised when it is used where jinja2
/// raises (attribute access, arithmetic, calls, tojson).
struct Undefined {
  std::string hint;
};

struct None {};

/// A Python sequence. Generators (what map/select/... return) and dict views behave like jinja2's:
/// iterable, but not indexable, and rendering them is refused (Python would print an address).
struct Array {
  enum class Kind { list, tuple, generator, dict_items, dict_keys, dict_values };
  std::vector<Value> items;
  Kind kind = Kind::list;
};

/// A Python dict with string keys, in insertion order.
struct Object {
  std::vector<std::pair<std::string, Value>> items;
  [[nodiscard]] const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

/// namespace(...): the one mutable object (`{% set ns.attr = ... %}` crosses loop scopes).
struct Namespace {
  Object attributes;
};

/// Arguments of a call: positional, then keyword (in source order).
struct CallArguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

/// A macro, a global function or a bound method.
struct Callable {
  std::string name;
  std::function<Value(CallArguments&)> invoke;
};

class Value {
 public:
  using Storage = std::variant<Undefined, None, bool, std::int64_t, double, std::string, std::shared_ptr<const Array>,
                               std::shared_ptr<const Object>, std::shared_ptr<Namespace>, std::shared_ptr<const Callable>>;

  Value() : storage_(Undefined{}) {}
  Value(Undefined undefined) : storage_(std::move(undefined)) {}  // NOLINT: values convert implicitly, as in Python
  Value(None) : storage_(None{}) {}                                 // NOLINT
  Value(bool flag) : storage_(flag) {}                              // NOLINT
  Value(int number) : storage_(static_cast<std::int64_t>(number)) {}  // NOLINT
  Value(std::int64_t number) : storage_(number) {}                  // NOLINT
  Value(double number) : storage_(number) {}                        // NOLINT
  Value(std::string text) : storage_(std::move(text)) {}            // NOLINT
  Value(std::string_view text) : storage_(std::string(text)) {}     // NOLINT
  Value(const char* text) : storage_(std::string(text)) {}          // NOLINT
  Value(Array array) : storage_(std::make_shared<const Array>(std::move(array))) {}      // NOLINT
  Value(Object object) : storage_(std::make_shared<const Object>(std::move(object))) {}  // NOLINT
  Value(std::shared_ptr<Namespace> ns) : storage_(std::move(ns)) {}                        // NOLINT
  Value(Callable callable) : storage_(std::make_shared<const Callable>(std::move(callable))) {}  // NOLINT

  static Value list(std::vector<Value> items, Array::Kind kind = Array::Kind::list) {
    return Value(Array{std::move(items), kind});
  }

  [[nodiscard]] bool is_undefined() const { return std::holds_alternative<Undefined>(storage_); }
  [[nodiscard]] bool is_none() const { return std::holds_alternative<None>(storage_); }
  [[nodiscard]] bool is_bool() const { return std::holds_alternative<bool>(storage_); }
  [[nodiscard]] bool is_int() const { return std::holds_alternative<std::int64_t>(storage_); }
  [[nodiscard]] bool is_float() const { return std::holds_alternative<double>(storage_); }
  /// Python numbers: bool is an int subclass.
  [[nodiscard]] bool is_number() const { return is_bool() || is_int() || is_float(); }
  [[nodiscard]] bool is_string() const { return std::holds_alternative<std::string>(storage_); }
  [[nodiscard]] bool is_array() const { return std::holds_alternative<std::shared_ptr<const Array>>(storage_); }
  [[nodiscard]] bool is_object() const { return std::holds_alternative<std::shared_ptr<const Object>>(storage_); }
  [[nodiscard]] bool is_namespace() const { return std::holds_alternative<std::shared_ptr<Namespace>>(storage_); }
  [[nodiscard]] bool is_callable() const { return std::holds_alternative<std::shared_ptr<const Callable>>(storage_); }
  /// list or tuple (indexable), not a generator or a dict view.
  [[nodiscard]] bool is_sequence_array() const {
    return is_array() && (array().kind == Array::Kind::list || array().kind == Array::Kind::tuple);
  }

  [[nodiscard]] const Undefined& undefined() const { return std::get<Undefined>(storage_); }
  [[nodiscard]] bool boolean() const { return std::get<bool>(storage_); }
  [[nodiscard]] std::int64_t integer() const { return std::get<std::int64_t>(storage_); }
  [[nodiscard]] double floating() const { return std::get<double>(storage_); }
  [[nodiscard]] const std::string& string() const { return std::get<std::string>(storage_); }
  [[nodiscard]] const Array& array() const { return *std::get<std::shared_ptr<const Array>>(storage_); }
  [[nodiscard]] const Object& object() const { return *std::get<std::shared_ptr<const Object>>(storage_); }
  [[nodiscard]] Namespace& ns() const { return *std::get<std::shared_ptr<Namespace>>(storage_); }
  [[nodiscard]] const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(storage_); }
  [[nodiscard]] const Storage& storage() const { return storage_; }

  /// int or bool as an int (Python's True + 1 == 2).
  [[nodiscard]] std::int64_t as_int() const { return is_bool() ? (boolean() ? 1 : 0) : integer(); }
  [[nodiscard]] double as_double() const { return is_float() ? floating() : static_cast<double>(as_int()); }

 private:
  Storage storage_;
};

inline const Value* Object::find(std::string_view key) const {
  for (const auto& [name, value] : items) {
    if (name == key) return &value;
  }
  return nullptr;
}

inline void Object::set(std::string key, Value value) {
  for (auto& [name, existing] : items) {
    if (name == key) {
      existing = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

/// Raised while rendering (jinja2's TypeError, UndefinedError, TemplateError, ...); the chat
/// template turns it into verl::InvalidArgument with the template line.
class RenderError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

namespace detail {

template <class... Args>
[[noreturn]] inline void throw_render_error(fmt::format_string<Args...> format, Args&&... args) {
  throw RenderError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace detail
}  // namespace verl::tokenizer::jinja
