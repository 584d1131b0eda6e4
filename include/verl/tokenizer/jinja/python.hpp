// Python's behaviour on Jinja values, as jinja2 inherits it: truthiness, str() and repr() (what
// {{ value }} prints), ==, <, `in`, json.dumps (transformers' tojson), and the code-point view of
// UTF-8 strings that len(), indexing and slicing use.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verl/tokenizer/detail/unicode.hpp"
#include "verl/tokenizer/jinja/value.hpp"

namespace verl::tokenizer::jinja::detail {

// ---- UTF-8 as code points ------------------------------------------------------------------------

/// The code points of `text`; a byte that is not valid UTF-8 stands for itself (never reads past
/// the end on malformed input).
inline std::vector<char32_t> code_points(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto length = tokenizer::detail::utf8_sequence_at(text, pos);
    if (length > 0) {
      std::size_t at = pos;
      out.push_back(tokenizer::detail::next_code_point(text, at));
      pos += static_cast<std::size_t>(length);
    } else {
      out.push_back(static_cast<unsigned char>(text[pos]));
      pos += 1;
    }
  }
  return out;
}

inline std::string from_code_points(const std::vector<char32_t>& points) {
  std::string out;
  out.reserve(points.size());
  for (const char32_t cp : points) tokenizer::detail::append_utf8(out, cp);
  return out;
}

inline std::size_t code_point_count(std::string_view text) {
  std::size_t count = 0;
  for (const char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return count;
}

inline bool is_python_space(char32_t cp) { return tokenizer::detail::is_python_space(cp); }

// ---- type names (as Python spells them in error messages) ----------------------------------------

inline std::string_view type_name(const Value& value) {
  struct Visitor {
    const Value& value;
    std::string_view operator()(const Undefined&) const { return "Undefined"; }
    std::string_view operator()(const None&) const { return "NoneType"; }
    std::string_view operator()(bool) const { return "bool"; }
    std::string_view operator()(std::int64_t) const { return "int"; }
    std::string_view operator()(double) const { return "float"; }
    std::string_view operator()(const std::string&) const { return "str"; }
    std::string_view operator()(const std::shared_ptr<const Array>& array) const {
      switch (array->kind) {
        case Array::Kind::tuple: return "tuple";
        case Array::Kind::generator: return "generator";
        case Array::Kind::dict_items: return "dict_items";
        case Array::Kind::dict_keys: return "dict_keys";
        case Array::Kind::dict_values: return "dict_values";
        case Array::Kind::list: break;
      }
      return "list";
    }
    std::string_view operator()(const std::shared_ptr<const Object>&) const { return "dict"; }
    std::string_view operator()(const std::shared_ptr<Namespace>&) const { return "Namespace"; }
    std::string_view operator()(const std::shared_ptr<const Callable>&) const { return "function"; }
  };
  return std::visit(Visitor{value}, value.storage());
}

/// Raises the UndefinedError an Undefined carries.
[[noreturn]] inline void fail_undefined(const Value& value) {
  throw RenderError(value.undefined().hint.empty() ? std::string("value is undefined") : value.undefined().hint);
}

// ---- truthiness -----------------------------------------------------------------------------------

inline bool truthy(const Value& value) {
  struct Visitor {
    bool operator()(const Undefined&) const { return false; }
    bool operator()(const None&) const { return false; }
    bool operator()(bool flag) const { return flag; }
    bool operator()(std::int64_t number) const { return number != 0; }
    bool operator()(double number) const { return number != 0.0; }
    bool operator()(const std::string& text) const { return !text.empty(); }
    bool operator()(const std::shared_ptr<const Array>& array) const {
      return array->kind == Array::Kind::generator || !array->items.empty();  // a generator object is truthy
    }
    bool operator()(const std::shared_ptr<const Object>& object) const { return !object->items.empty(); }
    bool operator()(const std::shared_ptr<Namespace>&) const { return true; }
    bool operator()(const std::shared_ptr<const Callable>&) const { return true; }
  };
  return std::visit(Visitor{}, value.storage());
}

// ---- numbers ----------------------------------------------------------------------------------------

/// Python's repr(float): the shortest round-tripping digits, positional for exponents in
/// [-4, 16), scientific otherwise ("1e+16", "1.5e-07"), always with a '.' or an exponent.
inline std::string float_repr(double number) {
  if (std::isnan(number)) return "nan";
  if (std::isinf(number)) return number > 0 ? "inf" : "-inf";
  std::array<char, 64> buffer{};
  const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), number, std::chars_format::scientific);
  const std::string_view scientific(buffer.data(), static_cast<std::size_t>(result.ptr - buffer.data()));
  // scientific is [-]d[.ddd]e[+-]XX
  const bool negative = scientific.front() == '-';
  const std::size_t e_at = scientific.find('e');
  std::string digits;
  for (std::size_t i = negative ? 1 : 0; i < e_at; ++i) {
    if (scientific[i] != '.') digits += scientific[i];
  }
  int exponent = 0;
  std::from_chars(scientific.data() + e_at + 1 + (scientific[e_at + 1] == '+' ? 1 : 0),
                  scientific.data() + scientific.size(), exponent);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<std::size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<std::size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(exponent) + 1) + "." +
             digits.substr(static_cast<std::size_t>(exponent) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += exponent < 0 ? "e-" : "e+";
  const std::string magnitude = std::to_string(exponent < 0 ? -exponent : exponent);
  out += (magnitude.size() < 2 ? "0" : "") + magnitude;
  return out;
}

// ---- repr / str ---------------------------------------------------------------------------------------

/// Python's str.isprintable for one code point: false for controls, separators other than the
/// space, format characters, surrogates and private use. (Unassigned code points, which Python
/// also escapes, are treated as printable: that needs the Unicode database.)
inline bool is_printable(char32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (cp < 0x300) return true;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
      (cp >= 0x205F && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF) {
    return false;
  }
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x8E2 || cp == 0x180E) {
    return false;
  }
  if ((cp >= 0xD800 && cp <= 0xF8FF) || (cp >= 0xFFF9 && cp <= 0xFFFB) || cp == 0xFFFE || cp == 0xFFFF) return false;
  if (cp == 0x110BD || cp == 0x110CD || (cp >= 0x13430 && cp <= 0x1343F) || (cp >= 0x1BCA0 && cp <= 0x1BCA3) ||
      (cp >= 0x1D173 && cp <= 0x1D17A) || cp == 0xE0001 || (cp >= 0xE0020 && cp <= 0xE007F) || cp >= 0xF0000) {
    return false;
  }
  return true;
}

/// Python's repr(str).
inline std::string string_repr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char32_t cp : code_points(text)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!is_printable(cp)) {
      out += cp < 0x100 ? fmt::format("\\x{:02x}", static_cast<unsigned>(cp))
             : cp < 0x10000 ? fmt::format("\\u{:04x}", static_cast<unsigned>(cp))
                            : fmt::format("\\U{:08x}", static_cast<unsigned>(cp));
    } else {
      tokenizer::detail::append_utf8(out, cp);
    }
  }
  out += quote;
  return out;
}

inline std::string repr(const Value& value);

/// Python's str(): what {{ value }} renders. Undefined renders as "".
inline std::string to_string(const Value& value) {
  if (value.is_string()) return value.string();
  if (value.is_undefined()) return "";
  return repr(value);
}

inline std::string repr(const Value& value) {
  struct Visitor {
    std::string operator()(const Undefined&) const { return "Undefined"; }
    std::string operator()(const None&) const { return "None"; }
    std::string operator()(bool flag) const { return flag ? "True" : "False"; }
    std::string operator()(std::int64_t number) const { return std::to_string(number); }
    std::string operator()(double number) const { return float_repr(number); }
    std::string operator()(const std::string& text) const { return string_repr(text); }
    std::string operator()(const std::shared_ptr<const Array>& array) const {
      std::string inner;
      for (std::size_t i = 0; i < array->items.size(); ++i) {
        if (i > 0) inner += ", ";
        inner += repr(array->items[i]);
      }
      switch (array->kind) {
        case Array::Kind::list: return "[" + inner + "]";
        case Array::Kind::tuple: return "(" + inner + (array->items.size() == 1 ? ",)" : ")");
        case Array::Kind::dict_items: return "dict_items([" + inner + "])";
        case Array::Kind::dict_keys: return "dict_keys([" + inner + "])";
        case Array::Kind::dict_values: return "dict_values([" + inner + "])";
        case Array::Kind::generator: break;
      }
      throw RenderError(
          "cannot render a generator (the result of map/select/reject/selectattr/rejectattr/items): Python would print "
          "its address; apply |list first");
    }
    std::string operator()(const std::shared_ptr<const Object>& object) const {
      std::string out = "{";
      for (std::size_t i = 0; i < object->items.size(); ++i) {
        if (i > 0) out += ", ";
        out += string_repr(object->items[i].first) + ": " + repr(object->items[i].second);
      }
      return out + "}";
    }
    std::string operator()(const std::shared_ptr<Namespace>& ns) const {
      return "<Namespace " + (*this)(std::make_shared<const Object>(ns->attributes)) + ">";
    }
    std::string operator()(const std::shared_ptr<const Callable>& callable) const {
      throw RenderError(fmt::format("cannot render the function '{}': Python would print its address", callable->name));
    }
  };
  return std::visit(Visitor{}, value.storage());
}

// ---- equality and ordering --------------------------------------------------------------------------

inline bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_string() && b.is_string()) return a.string() == b.string();
  if (a.is_array() && b.is_array()) {
    const auto& x = a.array();
    const auto& y = b.array();
    if (x.kind != y.kind || x.kind == Array::Kind::generator) return &x == &y;
    if (x.items.size() != y.items.size()) return false;
    for (std::size_t i = 0; i < x.items.size(); ++i) {
      if (!equal(x.items[i], y.items[i])) return false;
    }
    return true;
  }
  if (a.is_object() && b.is_object()) {
    const auto& x = a.object();
    const auto& y = b.object();
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [key, value] : x.items) {
      const Value* other = y.find(key);
      if (other == nullptr || !equal(value, *other)) return false;
    }
    return true;
  }
  if (a.is_namespace() && b.is_namespace()) return &a.ns() == &b.ns();
  if (a.is_callable() && b.is_callable()) return &a.callable() == &b.callable();
  return false;
}

/// Python's a < b for numbers, strings and same-kind sequences; TypeError otherwise.
inline bool less(const Value& a, const Value& b, std::string_view op = "<") {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.string() < b.string();  // UTF-8 byte order is code point order
  if (a.is_sequence_array() && b.is_sequence_array() && a.array().kind == b.array().kind) {
    const auto& x = a.array().items;
    const auto& y = b.array().items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i])) return less(x[i], y[i], op);
    }
    return x.size() < y.size();
  }
  throw RenderError(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b)));
}

/// The items a for loop (or list()) visits: sequences, a dict's keys, a string's characters;
/// Undefined iterates as empty, as in jinja2.
inline std::vector<Value> iterate(const Value& value) {
  if (value.is_array()) return value.array().items;
  if (value.is_undefined()) return {};
  if (value.is_object()) {
    std::vector<Value> keys;
    keys.reserve(value.object().items.size());
    for (const auto& item : value.object().items) keys.emplace_back(item.first);
    return keys;
  }
  if (value.is_string()) {
    std::vector<Value> characters;
    for (const char32_t cp : code_points(value.string())) {
      std::string one;
      tokenizer::detail::append_utf8(one, cp);
      characters.emplace_back(std::move(one));
    }
    return characters;
  }
  throw RenderError(fmt::format("'{}' object is not iterable", type_name(value)));
}

/// Python's `needle in haystack`.
inline bool contains(const Value& haystack, const Value& needle) {
  if (haystack.is_string()) {
    if (needle.is_undefined()) fail_undefined(needle);
    if (!needle.is_string()) {
      throw RenderError(fmt::format("'in <string>' requires string as left operand, not {}", type_name(needle)));
    }
    return haystack.string().find(needle.string()) != std::string::npos;
  }
  if (haystack.is_object()) return needle.is_string() && haystack.object().find(needle.string()) != nullptr;
  if (haystack.is_namespace() || haystack.is_none() || haystack.is_number() || haystack.is_callable()) {
    throw RenderError(fmt::format("argument of type '{}' is not iterable", type_name(haystack)));
  }
  for (const auto& item : iterate(haystack)) {
    if (equal(item, needle)) return true;
  }
  return false;
}

/// Python's len().
inline std::int64_t length(const Value& value) {
  if (value.is_string()) return static_cast<std::int64_t>(code_point_count(value.string()));
  if (value.is_array()) {
    if (value.array().kind == Array::Kind::generator) throw RenderError("object of type 'generator' has no len()");
    return static_cast<std::int64_t>(value.array().items.size());
  }
  if (value.is_object()) return static_cast<std::int64_t>(value.object().items.size());
  if (value.is_undefined()) return 0;
  throw RenderError(fmt::format("object of type '{}' has no len()", type_name(value)));
}

// ---- json.dumps ---------------------------------------------------------------------------------------

struct JsonOptions {
  bool ensure_ascii = false;  // transformers' tojson default
  std::optional<std::string> indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

inline void json_string(std::string& out, std::string_view text, bool ensure_ascii) {
  out += '"';
  for (const char32_t cp : code_points(text)) {
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
          if (cp >= 0x10000) {
            const char32_t v = cp - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                               static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
          }
        } else {
          tokenizer::detail::append_utf8(out, cp);
        }
    }
  }
  out += '"';
}

inline void json_dump(std::string& out, const Value& value, const JsonOptions& options, int depth) {
  if (depth > 512) throw RenderError("tojson: value nested deeper than 512 levels");
  const auto newline = [&](int level) {
    if (!options.indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += *options.indent;
  };
  if (value.is_none()) {
    out += "null";
  } else if (value.is_bool()) {
    out += value.boolean() ? "true" : "false";
  } else if (value.is_int()) {
    out += std::to_string(value.integer());
  } else if (value.is_float()) {
    const double number = value.floating();
    out += std::isnan(number) ? "NaN" : std::isinf(number) ? (number > 0 ? "Infinity" : "-Infinity") : float_repr(number);
  } else if (value.is_string()) {
    json_string(out, value.string(), options.ensure_ascii);
  } else if (value.is_sequence_array()) {
    const auto& items = value.array().items;
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += options.item_separator;
      newline(depth + 1);
      json_dump(out, items[i], options, depth + 1);
    }
    newline(depth);
    out += ']';
  } else if (value.is_object()) {
    auto items = value.object().items;
    if (items.empty()) {
      out += "{}";
      return;
    }
    if (options.sort_keys) {
      std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    out += '{';
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += options.item_separator;
      newline(depth + 1);
      json_string(out, items[i].first, options.ensure_ascii);
      out += options.key_separator;
      json_dump(out, items[i].second, options, depth + 1);
    }
    newline(depth);
    out += '}';
  } else {
    throw RenderError(fmt::format("Object of type {} is not JSON serializable", type_name(value)));
  }
}

}  // namespace verl::tokenizer::jinja::detail
