// jinja2's built-in tests, attribute and item access (with the immutable sandbox's
// rules: dict/list mutators are unsafe), the str/dict/list methods templates call, and the
// globals transformers provides (raise_exception, strftime_now) next to jinja2's (range,
// namespace, dict).
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/tokenizer/jinja/python.hpp"
#include "verl/tokenizer/jinja/strings.hpp"

namespace verl::tokenizer::jinja::detail {

inline constexpr std::string_view known_filters[] = {
    "abs",    "attr",   "capitalize", "center",     "count",  "d",       "default", "e",     "escape",
    "first",  "float",  "indent",     "int",        "items",  "join",    "last",    "length", "list",
    "lower",  "map",    "max",        "min",        "reject", "rejectattr", "replace", "reverse", "round",
    "safe",   "select", "selectattr", "sort",       "string", "sum",     "title",   "tojson", "trim",
    "unique", "upper",  "wordcount"};

inline constexpr std::string_view known_tests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq",    "equalto", "escaped", "even",   "false",
    "float",   "ge",       "gt",      "greaterthan", "in",    "integer", "iterable", "le",    "lessthan",
    "lower",   "lt",       "mapping", "ne",          "none",  "number",  "odd",     "sameas", "sequence",
    "string",  "true",     "undefined", "upper",     "==",    "!=",      "<",       "<=",     ">",
    ">="};

inline bool is_known_filter(std::string_view name) {
  return std::find(std::begin(known_filters), std::end(known_filters), name) != std::end(known_filters);
}
inline bool is_known_test(std::string_view name) {
  return std::find(std::begin(known_tests), std::end(known_tests), name) != std::end(known_tests);
}

/// What the host supplies to the globals: a fixed "now" for strftime_now (tests), else the clock.
struct Environment {
  std::optional<std::tm> now;
};

// ---- argument binding ---------------------------------------------------------------------------

/// Binds a call's arguments to a Python-style signature: positional first, then by keyword.
class Signature {
 public:
  Signature(std::string_view function, CallArguments& arguments, std::vector<std::string_view> parameters)
      : function_(function), arguments_(arguments), parameters_(std::move(parameters)) {
    if (arguments_.positional.size() > parameters_.size()) {
      throw_render_error("{}() takes at most {} argument(s), got {}", function_, parameters_.size(),
                         arguments_.positional.size());
    }
    for (const auto& [name, value] : arguments_.keyword) {
      const auto found = std::find(parameters_.begin(), parameters_.end(), name);
      if (found == parameters_.end()) throw_render_error("{}() got an unexpected keyword argument '{}'", function_, name);
      if (static_cast<std::size_t>(found - parameters_.begin()) < arguments_.positional.size()) {
        throw_render_error("{}() got multiple values for argument '{}'", function_, name);
      }
    }
  }
  /// The argument for parameter `index`, or nullopt when not given.
  [[nodiscard]] std::optional<Value> get(std::size_t index) const {
    if (index < arguments_.positional.size()) return arguments_.positional[index];
    for (const auto& [name, value] : arguments_.keyword) {
      if (name == parameters_[index]) return value;
    }
    return std::nullopt;
  }
  [[nodiscard]] Value get_or(std::size_t index, Value fallback) const { return get(index).value_or(std::move(fallback)); }
  [[nodiscard]] Value required(std::size_t index) const {
    auto value = get(index);
    if (!value) throw_render_error("{}() missing required argument '{}'", function_, parameters_[index]);
    return *value;
  }
  [[nodiscard]] std::string string(std::size_t index, std::string fallback) const {
    const auto value = get(index);
    if (!value || value->is_none()) return fallback;
    if (!value->is_string()) {
      throw_render_error("{}(): argument '{}' must be a string, got {}", function_, parameters_[index], type_name(*value));
    }
    return value->string();
  }
  [[nodiscard]] std::optional<std::string> optional_string(std::size_t index) const {
    const auto value = get(index);
    if (!value || value->is_none()) return std::nullopt;
    if (!value->is_string()) {
      throw_render_error("{}(): argument '{}' must be a string or None, got {}", function_, parameters_[index],
                         type_name(*value));
    }
    return value->string();
  }
  [[nodiscard]] std::int64_t integer(std::size_t index, std::int64_t fallback) const {
    const auto value = get(index);
    if (!value || value->is_none()) return fallback;
    if (!value->is_int() && !value->is_bool()) {
      throw_render_error("{}(): argument '{}' must be an integer, got {}", function_, parameters_[index], type_name(*value));
    }
    return value->as_int();
  }
  [[nodiscard]] bool flag(std::size_t index, bool fallback) const {
    const auto value = get(index);
    return value ? truthy(*value) : fallback;
  }

 private:
  std::string_view function_;
  CallArguments& arguments_;
  std::vector<std::string_view> parameters_;
};

inline Value make_function(std::string name, std::function<Value(CallArguments&)> invoke) {
  return Value(Callable{std::move(name), std::move(invoke)});
}

inline std::string object_label(const Value& value) {
  if (value.is_none()) return "None";
  if (value.is_namespace()) return "jinja2.utils.Namespace object";
  return std::string(type_name(value)) + " object";
}

inline Value missing_attribute(const Value& object, std::string_view name) {
  return Value(Undefined{fmt::format("'{}' has no attribute '{}'", object_label(object), name)});
}

inline Value unsafe_attribute(const Value& object, std::string_view name) {
  return Value(Undefined{fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(object))});
}

// ---- attribute and item access -------------------------------------------------------------------

inline Value string_method(const std::string& text, std::string_view name);
inline Value dict_method(const Value& dict, std::string_view name);
inline Value list_method(const Value& list, std::string_view name);

/// obj.name as jinja2's sandbox resolves it: Python attributes (methods) first, then obj['name'].
inline Value get_attribute(const Value& object, std::string_view name) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_object()) {
    if (Value method = dict_method(object, name); method.is_callable() || !method.undefined().hint.empty()) {
      return method;  // a dict method, or an unsafe mutator
    }
    if (const Value* found = object.object().find(name)) return *found;
    return missing_attribute(object, name);
  }
  if (object.is_namespace()) {
    if (const Value* found = object.ns().attributes.find(name)) return *found;
    return missing_attribute(object, name);
  }
  if (object.is_string()) return string_method(object.string(), name);
  if (object.is_sequence_array()) return list_method(object, name);
  return missing_attribute(object, name);
}

/// obj[key] as jinja2 resolves it: Python item access, falling back to the attribute for string
/// keys, and to Undefined when neither exists.
inline Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_object() && key.is_string()) {
    if (const Value* found = object.object().find(key.string())) return *found;
    return get_attribute(object, key.string());
  }
  if ((object.is_sequence_array() || object.is_string()) && (key.is_int() || key.is_bool())) {
    if (object.is_string()) {
      const std::vector<char32_t> points = code_points(object.string());
      if (const auto at = python_index(key.as_int(), points.size())) {
        std::string one;
        tokenizer::detail::append_utf8(one, points[*at]);
        return Value(std::move(one));
      }
    } else if (const auto at = python_index(key.as_int(), object.array().items.size())) {
      return object.array().items[*at];
    }
    return Value(Undefined{fmt::format("'{}' has no attribute {}", object_label(object), key.as_int())});
  }
  if (key.is_string()) return get_attribute(object, key.string());
  if (key.is_undefined()) fail_undefined(key);
  return Value(Undefined{fmt::format("'{}' has no attribute {}", object_label(object), repr(key))});
}

inline Value slice(const Value& object, std::optional<std::int64_t> start, std::optional<std::int64_t> stop,
                   std::optional<std::int64_t> step) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_string()) {
    const std::vector<char32_t> points = code_points(object.string());
    std::vector<char32_t> out;
    for (const std::size_t at : slice_positions(points.size(), start, stop, step)) out.push_back(points[at]);
    return Value(from_code_points(out));
  }
  if (object.is_sequence_array()) {
    const auto& items = object.array().items;
    std::vector<Value> out;
    for (const std::size_t at : slice_positions(items.size(), start, stop, step)) out.push_back(items[at]);
    return Value::list(std::move(out), object.array().kind);
  }
  return Value(Undefined{fmt::format("'{}' has no attribute 'slice'", object_label(object))});
}

/// A dotted attribute path ("function.name", "0.role") as filters' attribute= resolves it.
inline Value get_attribute_path(const Value& object, std::string_view path) {
  Value current = object;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string_view part = path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (current.is_undefined()) return current;
    current = numeric ? get_item(current, Value(static_cast<std::int64_t>(std::stoll(std::string(part)))))
                      : get_item(current, Value(part));
    if (dot == std::string_view::npos) return current;
    start = dot + 1;
  }
}

// ---- methods ----------------------------------------------------------------------------------------

inline std::int64_t code_point_offset(const std::string& text, std::size_t byte_offset) {
  return static_cast<std::int64_t>(code_point_count(std::string_view(text).substr(0, byte_offset)));
}

inline bool str_predicate(const std::string& text, bool (*predicate)(char32_t)) {
  const std::vector<char32_t> points = code_points(text);
  return !points.empty() && std::all_of(points.begin(), points.end(), predicate);
}

inline Value string_method(const std::string& text, std::string_view name) {
  const auto method = [&](auto body) {
    return make_function("str." + std::string(name), [text, body, method_name = std::string(name)](CallArguments& args) {
      return body(text, args, method_name);
    });
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return method([](const std::string& s, CallArguments& args, const std::string& n) {
      const Signature sig(n, args, {"chars"});
      return Value(str_strip(s, sig.optional_string(0), n != "rstrip", n != "lstrip"));
    });
  }
  if (name == "split" || name == "rsplit") {
    return method([](const std::string& s, CallArguments& args, const std::string& n) {
      const Signature sig(n, args, {"sep", "maxsplit"});
      std::vector<Value> parts;
      for (auto& part : str_split(s, sig.optional_string(0), sig.integer(1, -1), n == "rsplit")) parts.emplace_back(std::move(part));
      return Value::list(std::move(parts));
    });
  }
  if (name == "splitlines") {
    return method([](const std::string& s, CallArguments& args, const std::string& n) {
      const Signature sig(n, args, {});
      std::vector<Value> lines;
      for (auto& line : str_splitlines(s)) lines.emplace_back(std::move(line));
      return Value::list(std::move(lines));
    });
  }
  if (name == "startswith" || name == "endswith") {
    return method([](const std::string& s, CallArguments& args, const std::string& n) {
      const Signature sig(n, args, {"prefix"});
      const Value affix = sig.required(0);
      std::vector<Value> candidates = affix.is_sequence_array() && affix.array().kind == Array::Kind::tuple
                                          ? affix.array().items
                                          : std::vector<Value>{affix};
      for (const auto& candidate : candidates) {
        if (!candidate.is_string()) {
          throw_render_error("{} first arg must be str or a tuple of str, not {}", n, type_name(candidate));
        }
        const std::string& a = candidate.string();
        if (n == "startswith" ? s.starts_with(a) : s.ends_with(a)) return Value(true);
      }
      return Value(false);
    });
  }
  if (name == "replace") {
    return method([](const std::string& s, CallArguments& args, const std::string& n) {
      const Signature sig(n, args, {"old", "new", "count"});
      return Value(str_replace(s, sig.string(0, ""), sig.string(1, ""), sig.integer(2, -1)));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return method([](const std::string& s, CallArguments& args, const std::string& n) {
      const Signature sig(n, args, {});
      if (n == "upper") return Value(str_upper(s));
      if (n == "lower") return Value(str_lower(s));
      if (n == "title") return Value(str_title(s));
      return Value(str_capitalize(s));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return method([](const std::string& s, CallArguments& args, const std::string& n) {
      const Signature sig(n, args, {"sub"});
      const std::string sub = sig.string(0, "");
      if (n == "count") {
        if (sub.empty()) return Value(static_cast<std::int64_t>(code_point_count(s)) + 1);
        std::int64_t count = 0;
        for (std::size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++count;
        return Value(count);
      }
      const std::size_t found = n == "find" || n == "index" ? s.find(sub) : s.rfind(sub);
      if (found == std::string::npos) {
        if (n == "index" || n == "rindex") throw_render_error("substring not found");
        return Value(static_cast<std::int64_t>(-1));
      }
      return Value(code_point_offset(s, found));
    });
  }
  if (name == "join") {
    return method([](const std::string& s, CallArguments& args, const std::string& n) {
      const Signature sig(n, args, {"iterable"});
      std::string out;
      std::size_t index = 0;
      for (const auto& item : iterate(sig.required(0))) {
        if (!item.is_string()) {
          throw_render_error("sequence item {}: expected str instance, {} found", index, type_name(item));
        }
        if (index++ > 0) out += s;
        out += item.string();
      }
      return Value(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper") {
    return method([](const std::string& s, CallArguments& args, const std::string& n) {
      const Signature sig(n, args, {});
      if (n == "isspace") return Value(str_predicate(s, [](char32_t c) { return is_python_space(c); }));
      if (n == "isdigit") return Value(str_predicate(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
      if (n == "isalpha") return Value(str_predicate(s, [](char32_t c) { return c < 0x80 ? std::isalpha(static_cast<int>(c)) != 0 : is_cased(c); }));
      if (n == "isalnum") {
        return Value(str_predicate(s, [](char32_t c) { return c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0 : is_cased(c); }));
      }
      // islower / isupper: at least one cased character and none of the other case.
      const std::vector<char32_t> points = code_points(s);
      bool any_cased = false;
      for (const char32_t c : points) {
        if (!is_cased(c)) continue;
        any_cased = true;
        if (n == "islower" ? to_lower(c) != c : to_upper(c) != c) return Value(false);
      }
      return Value(any_cased);
    });
  }
  if (name == "format") {
    return method([](const std::string&, CallArguments&, const std::string&) -> Value {
      throw_render_error("str.format() is not supported by this chat-template engine; use '~' or the + operator");
    });
  }
  return Value(Undefined{fmt::format("'str object' has no attribute '{}'", name)});
}

inline Value dict_method(const Value& dict, std::string_view name) {
  if (name == "items" || name == "keys" || name == "values") {
    return make_function("dict." + std::string(name), [dict, kind = std::string(name)](CallArguments& args) {
      const Signature sig(kind, args, {});
      std::vector<Value> out;
      for (const auto& [key, value] : dict.object().items) {
        if (kind == "items") out.push_back(Value::list({Value(key), value}, Array::Kind::tuple));
        else if (kind == "keys") out.emplace_back(key);
        else out.push_back(value);
      }
      const Array::Kind view = kind == "items" ? Array::Kind::dict_items : kind == "keys" ? Array::Kind::dict_keys : Array::Kind::dict_values;
      return Value::list(std::move(out), view);
    });
  }
  if (name == "get") {
    return make_function("dict.get", [dict](CallArguments& args) {
      const Signature sig("get", args, {"key", "default"});
      const Value key = sig.required(0);
      if (key.is_string()) {
        if (const Value* found = dict.object().find(key.string())) return *found;
      }
      return sig.get_or(1, Value(None{}));
    });
  }
  if (name == "copy") {
    return make_function("dict.copy", [dict](CallArguments& args) {
      const Signature sig("copy", args, {});
      return dict;
    });
  }
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear") {
    return unsafe_attribute(dict, name);
  }
  return Value(Undefined{});  // not a method: the caller looks the key up
}

inline Value list_method(const Value& list, std::string_view name) {
  if (name == "index" || name == "count") {
    return make_function("list." + std::string(name), [list, kind = std::string(name)](CallArguments& args) {
      const Signature sig(kind, args, {"value"});
      const Value needle = sig.required(0);
      std::int64_t count = 0;
      const auto& items = list.array().items;
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (!equal(items[i], needle)) continue;
        if (kind == "index") return Value(static_cast<std::int64_t>(i));
        ++count;
      }
      if (kind == "index") throw_render_error("{} is not in list", repr(needle));
      return Value(count);
    });
  }
  if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
      name == "reverse" || name == "sort" || name == "clear") {
    return unsafe_attribute(list, name);
  }
  return missing_attribute(list, name);
}

/// Calls a callable value (jinja2 raises for Undefined and non-callables).
inline Value call_value(const Value& callee, CallArguments& arguments) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable()) throw_render_error("'{}' object is not callable", type_name(callee));
  return callee.callable().invoke(arguments);
}

// ---- numbers ------------------------------------------------------------------------------------------

inline std::optional<double> parse_python_float(std::string_view text) {
  const std::string stripped = str_strip(text, std::nullopt, true, true);
  std::string cleaned;
  for (const char c : stripped) {
    if (c != '_') cleaned += c;
  }
  if (cleaned.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(cleaned.c_str(), &end);
  if (end != cleaned.c_str() + cleaned.size()) return std::nullopt;
  return value;
}

inline std::optional<std::int64_t> parse_python_int(std::string_view text, int base) {
  std::string cleaned = str_strip(text, std::nullopt, true, true);
  std::erase(cleaned, '_');
  if (cleaned.empty()) return std::nullopt;
  std::size_t start = cleaned[0] == '+' || cleaned[0] == '-' ? 1 : 0;
  const bool negative = cleaned[0] == '-';
  if (base == 16 || base == 8 || base == 2) {
    const char prefix = base == 16 ? 'x' : base == 8 ? 'o' : 'b';
    if (cleaned.size() > start + 1 && cleaned[start] == '0' && std::tolower(cleaned[start + 1]) == prefix) start += 2;
  }
  std::int64_t value = 0;
  const auto result = std::from_chars(cleaned.data() + start, cleaned.data() + cleaned.size(), value, base);
  if (result.ec != std::errc() || result.ptr != cleaned.data() + cleaned.size() || start == cleaned.size()) return std::nullopt;
  return negative ? -value : value;
}

/// Python's round(x, n) for floats: correctly rounded, ties to even on the exact binary value.
inline double python_round(double value, std::int64_t precision) {
  if (!std::isfinite(value)) return value;
  if (precision >= 0) {
    const std::string text = fmt::format("{:.{}f}", value, std::min<std::int64_t>(precision, 340));
    return std::strtod(text.c_str(), nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-precision));
  return std::nearbyint(value / scale) * scale;
}

// ---- tests ---------------------------------------------------------------------------------------------

inline bool apply_test(std::string_view name, const Value& value, CallArguments& arguments) {
  const auto one_argument = [&]() -> Value {
    const Signature sig(name, arguments, {"other"});
    return sig.required(0);
  };
  const auto no_argument = [&] { const Signature sig(name, arguments, {}); };
  if (name == "defined") return no_argument(), !value.is_undefined();
  if (name == "undefined") return no_argument(), value.is_undefined();
  if (name == "none") return no_argument(), value.is_none();
  if (name == "boolean") return no_argument(), value.is_bool();
  if (name == "true") return no_argument(), value.is_bool() && value.boolean();
  if (name == "false") return no_argument(), value.is_bool() && !value.boolean();
  if (name == "integer") return no_argument(), value.is_int();
  if (name == "float") return no_argument(), value.is_float();
  if (name == "number") return no_argument(), value.is_number();
  if (name == "string") return no_argument(), value.is_string();
  if (name == "mapping") return no_argument(), value.is_object();
  if (name == "callable") return no_argument(), value.is_callable();
  if (name == "escaped") return no_argument(), false;
  if (name == "iterable") return no_argument(), value.is_array() || value.is_object() || value.is_string() || value.is_undefined();
  if (name == "sequence") {
    no_argument();
    return value.is_sequence_array() || value.is_object() || value.is_string() || value.is_undefined() ||
           (value.is_array() && value.array().kind != Array::Kind::generator);
  }
  if (name == "lower" || name == "upper") {
    no_argument();
    if (!value.is_string()) return false;
    CallArguments none;
    return truthy(string_method(value.string(), name == "lower" ? "islower" : "isupper").callable().invoke(none));
  }
  if (name == "odd" || name == "even") {
    no_argument();
    if (!value.is_int() && !value.is_bool()) throw_render_error("'{}' test: expected an integer, got {}", name, type_name(value));
    const std::int64_t remainder = value.as_int() % 2;
    return name == "odd" ? remainder != 0 : remainder == 0;
  }
  if (name == "divisibleby") {
    const Value divisor = one_argument();
    if (!value.is_int() && !value.is_bool()) throw_render_error("'divisibleby' test: expected an integer, got {}", type_name(value));
    if (!divisor.is_int() || divisor.integer() == 0) throw_render_error("'divisibleby' test: expected a non-zero integer divisor");
    return value.as_int() % divisor.integer() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(value, one_argument());
  if (name == "ne" || name == "!=") return !equal(value, one_argument());
  if (name == "lt" || name == "lessthan" || name == "<") return less(value, one_argument(), "<");
  if (name == "le" || name == "<=") {
    const Value other = one_argument();
    return less(value, other, "<=") || equal(value, other);
  }
  if (name == "gt" || name == "greaterthan" || name == ">") return less(one_argument(), value, ">");
  if (name == "ge" || name == ">=") {
    const Value other = one_argument();
    return less(other, value, ">=") || equal(value, other);
  }
  if (name == "in") return contains(one_argument(), value);
  if (name == "sameas") {
    // Python's `is`: singletons compare by value, shared objects by identity.
    const Value other = one_argument();
    if (value.storage().index() != other.storage().index()) return false;
    if (value.is_none() || value.is_undefined()) return true;
    if (value.is_bool()) return value.boolean() == other.boolean();
    if (value.is_namespace()) return &value.ns() == &other.ns();
    if (value.is_callable()) return &value.callable() == &other.callable();
    if (value.is_array()) return &value.array() == &other.array();
    if (value.is_object()) return &value.object() == &other.object();
    return false;
  }
  throw_render_error("unknown test '{}'", name);
}

}  // namespace verl::tokenizer::jinja::detail
