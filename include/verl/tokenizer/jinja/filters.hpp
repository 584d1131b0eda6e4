// jinja2's built-in filters with their Python semantics, and transformers' tojson override
// (json.dumps with ensure_ascii=False, optional indent / separators / sort_keys, no HTML escaping).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/markup.hpp"
#include "verl/tokenizer/jinja/builtins.hpp"

namespace verl::tokenizer::jinja::detail {

inline Value apply_filter(std::string_view name, const Value& value, CallArguments& arguments);

/// The item's attribute (dotted path) when `attribute` is given, else the item.
inline Value attribute_or_self(const Value& item, const std::optional<std::string>& attribute) {
  return attribute ? get_attribute_path(item, *attribute) : item;
}

/// Key for sort/min/max/unique: strings lower-cased unless case_sensitive.
inline Value sort_key(const Value& item, bool case_sensitive) {
  if (!case_sensitive && item.is_string()) return Value(str_lower(item.string()));
  return item;
}

/// select/reject/selectattr/rejectattr: keep items whose (attribute's) test result == keep.
inline Value filter_by_test(const Value& value, CallArguments& arguments, bool by_attribute, bool keep) {
  if (by_attribute && arguments.positional.empty()) throw_render_error("selectattr/rejectattr: missing the attribute name");
  std::optional<std::string> attribute;
  std::size_t next = 0;
  if (by_attribute) {
    if (!arguments.positional[0].is_string()) throw_render_error("selectattr/rejectattr: the attribute name must be a string");
    attribute = arguments.positional[0].string();
    next = 1;
  }
  std::optional<std::string> test;
  if (next < arguments.positional.size()) {
    if (!arguments.positional[next].is_string()) throw_render_error("select/reject: the test name must be a string");
    test = arguments.positional[next].string();
    if (!is_known_test(*test)) throw_render_error("select/reject: no test named '{}'", *test);
    ++next;
  }
  if (!arguments.keyword.empty()) throw_render_error("select/reject/selectattr/rejectattr take no keyword arguments");
  std::vector<Value> out;
  for (const auto& item : iterate(value)) {
    const Value subject = attribute_or_self(item, attribute);
    bool passed = false;
    if (test) {
      CallArguments test_arguments;
      test_arguments.positional.assign(arguments.positional.begin() + static_cast<std::ptrdiff_t>(next), arguments.positional.end());
      passed = apply_test(*test, subject, test_arguments);
    } else {
      passed = truthy(subject);
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::list(std::move(out), Array::Kind::generator);
}

/// |indent(width=4, first=False, blank=False), with jinja2's handling of the last line.
inline std::string indent_text(const std::string& text, const std::string& indentation, bool first, bool blank) {
  const std::vector<std::string> lines = str_splitlines(text + "\n");
  std::string out;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) out += (i > 0 ? "\n" + indentation : "") + lines[i];
  } else {
    out = lines.empty() ? "" : lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i) out += "\n" + (lines[i].empty() ? "" : indentation + lines[i]);
  }
  return first ? indentation + out : out;
}

/// Jinja's escape filter (markupsafe): &, <, >, " and ' as entities.
inline std::string html_escape(std::string_view text) {
  return escape_markup(text, {{'&', "&amp;"}, {'<', "&lt;"}, {'>', "&gt;"}, {'"', "&#34;"}, {'\'', "&#39;"}});
}

/// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
inline std::string to_json(const Value& value, CallArguments& arguments) {
  const Signature sig("tojson", arguments, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions options;
  options.ensure_ascii = sig.flag(0, false);
  if (const auto indent = sig.get(1); indent && !indent->is_none()) {
    if (indent->is_string()) {
      options.indent = indent->string();
    } else if (indent->is_int() || indent->is_bool()) {
      options.indent = std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, indent->as_int())), ' ');
    } else {
      throw_render_error("tojson(): indent must be an integer or a string, got {}", type_name(*indent));
    }
    options.item_separator = ",";
  }
  if (const auto separators = sig.get(2); separators && !separators->is_none()) {
    if (!separators->is_sequence_array() || separators->array().items.size() != 2 ||
        !separators->array().items[0].is_string() || !separators->array().items[1].is_string()) {
      throw_render_error("tojson(): separators must be a pair of strings");
    }
    options.item_separator = separators->array().items[0].string();
    options.key_separator = separators->array().items[1].string();
  }
  options.sort_keys = sig.flag(3, false);
  std::string out;
  json_dump(out, value, options, 0);
  return out;
}

inline Value apply_filter(std::string_view name, const Value& value, CallArguments& arguments) {
  const auto no_arguments = [&] { const Signature sig(name, arguments, {}); };
  const auto as_text = [&]() -> std::string { return to_string(value); };
  if (name == "default" || name == "d") {
    const Signature sig(name, arguments, {"default_value", "boolean"});
    const bool use_default = value.is_undefined() || (sig.flag(1, false) && !truthy(value));
    return use_default ? sig.get_or(0, Value(std::string())) : value;
  }
  if (name == "length" || name == "count") return no_arguments(), Value(length(value));
  if (name == "string") return no_arguments(), Value(as_text());
  if (name == "safe") return no_arguments(), Value(as_text());
  if (name == "e" || name == "escape") return no_arguments(), Value(html_escape(as_text()));
  if (name == "upper") return no_arguments(), Value(str_upper(as_text()));
  if (name == "lower") return no_arguments(), Value(str_lower(as_text()));
  if (name == "capitalize") return no_arguments(), Value(str_capitalize(as_text()));
  if (name == "title") {
    // jinja2 splits words at white space, '-', and opening brackets, then capitalises each piece.
    no_arguments();
    const std::vector<char32_t> points = code_points(as_text());
    std::vector<char32_t> out;
    bool word_start = true;
    for (const char32_t cp : points) {
      const bool separator = is_python_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
      if (separator) {
        out.push_back(cp);
        word_start = true;
      } else {
        out.push_back(word_start ? to_upper(cp) : to_lower(cp));
        word_start = false;
      }
    }
    return Value(from_code_points(out));
  }
  if (name == "trim") {
    const Signature sig(name, arguments, {"chars"});
    return Value(str_strip(as_text(), sig.optional_string(0), true, true));
  }
  if (name == "replace") {
    const Signature sig(name, arguments, {"old", "new", "count"});
    return Value(str_replace(as_text(), to_string(sig.required(0)), to_string(sig.required(1)), sig.integer(2, -1)));
  }
  if (name == "center") {
    const Signature sig(name, arguments, {"width"});
    const std::string text = as_text();
    const auto width = sig.integer(0, 80);
    const auto size = static_cast<std::int64_t>(code_point_count(text));
    if (width <= size) return Value(text);
    const std::int64_t total = width - size;
    const std::int64_t left = total / 2 + (total & width & 1);  // Python's str.center split
    return Value(std::string(static_cast<std::size_t>(left), ' ') + text + std::string(static_cast<std::size_t>(total - left), ' '));
  }
  if (name == "indent") {
    const Signature sig(name, arguments, {"width", "first", "blank"});
    const Value width = sig.get_or(0, Value(4));
    const std::string indentation = width.is_string() ? width.string() : std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, width.as_int())), ' ');
    return Value(indent_text(as_text(), indentation, sig.flag(1, false), sig.flag(2, false)));
  }
  if (name == "wordcount") {
    no_arguments();
    std::int64_t words = 0;
    bool in_word = false;
    for (const char32_t cp : code_points(as_text())) {
      const bool word_char = cp == '_' || (cp < 0x80 ? std::isalnum(static_cast<int>(cp)) != 0 : !is_python_space(cp));
      if (word_char && !in_word) ++words;
      in_word = word_char;
    }
    return Value(words);
  }
  if (name == "tojson") return Value(to_json(value, arguments));
  if (name == "abs") {
    no_arguments();
    if (value.is_float()) return Value(std::fabs(value.floating()));
    if (value.is_int() || value.is_bool()) return Value(value.as_int() < 0 ? -value.as_int() : value.as_int());
    throw_render_error("bad operand type for abs(): '{}'", type_name(value));
  }
  if (name == "int") {
    const Signature sig(name, arguments, {"default", "base"});
    const Value fallback = sig.get_or(0, Value(0));
    if (value.is_int() || value.is_bool()) return Value(value.as_int());
    if (value.is_float()) return std::isfinite(value.floating()) ? Value(static_cast<std::int64_t>(value.floating())) : fallback;
    if (value.is_string()) {
      if (const auto parsed = parse_python_int(value.string(), static_cast<int>(sig.integer(1, 10)))) return Value(*parsed);
      if (const auto parsed = parse_python_float(value.string()); parsed && std::isfinite(*parsed)) {
        return Value(static_cast<std::int64_t>(*parsed));
      }
    }
    return fallback;
  }
  if (name == "float") {
    const Signature sig(name, arguments, {"default"});
    if (value.is_number()) return Value(value.as_double());
    if (value.is_string()) {
      if (const auto parsed = parse_python_float(value.string())) return Value(*parsed);
    }
    return sig.get_or(0, Value(0.0));
  }
  if (name == "round") {
    const Signature sig(name, arguments, {"precision", "method"});
    const std::int64_t precision = sig.integer(0, 0);
    const std::string method = sig.string(1, "common");
    if (!value.is_number()) throw_render_error("round: expected a number, got {}", type_name(value));
    if (method == "common") {
      if (!value.is_float()) return Value(value.as_int());  // round(int, n) stays an int
      return Value(python_round(value.floating(), precision));
    }
    if (method != "floor" && method != "ceil") throw_render_error("round: method must be 'common', 'floor' or 'ceil'");
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double scaled = value.as_double() * scale;
    return Value((method == "floor" ? std::floor(scaled) : std::ceil(scaled)) / scale);
  }
  if (name == "first") {
    no_arguments();
    const std::vector<Value> items = iterate(value);
    if (items.empty()) return Value(Undefined{"No first item, sequence was empty."});
    return items.front();
  }
  if (name == "last") {
    no_arguments();
    if (value.is_array() && value.array().kind == Array::Kind::generator) throw_render_error("'generator' object is not reversible");
    const std::vector<Value> items = iterate(value);
    if (items.empty()) return Value(Undefined{"No last item, sequence was empty."});
    return items.back();
  }
  if (name == "list") return no_arguments(), Value::list(iterate(value));
  if (name == "reverse") {
    no_arguments();
    if (value.is_string()) {
      std::vector<char32_t> points = code_points(value.string());
      std::reverse(points.begin(), points.end());
      return Value(from_code_points(points));
    }
    std::vector<Value> items = iterate(value);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items), Array::Kind::generator);  // reversed() is an iterator
  }
  if (name == "items") {
    no_arguments();
    if (value.is_undefined()) return Value::list({}, Array::Kind::generator);
    if (!value.is_object()) throw_render_error("Can only get item pairs from a mapping.");
    std::vector<Value> pairs;
    for (const auto& [key, item] : value.object().items) pairs.push_back(Value::list({Value(key), item}, Array::Kind::tuple));
    return Value::list(std::move(pairs), Array::Kind::generator);
  }
  if (name == "join") {
    const Signature sig(name, arguments, {"d", "attribute"});
    const std::string separator = to_string(sig.get_or(0, Value(std::string())));
    const std::optional<std::string> attribute = sig.optional_string(1);
    std::string out;
    bool first = true;
    for (const auto& item : iterate(value)) {
      if (!first) out += separator;
      first = false;
      out += to_string(attribute_or_self(item, attribute));
    }
    return Value(std::move(out));
  }
  if (name == "map") {
    std::vector<Value> out;
    const bool by_attribute = arguments.positional.empty();
    if (by_attribute) {
      const Signature sig(name, arguments, {"attribute", "default"});
      const std::string attribute = sig.string(0, "");
      if (attribute.empty()) throw_render_error("map: expected a filter name or attribute=");
      const std::optional<Value> fallback = sig.get(1);
      for (const auto& item : iterate(value)) {
        Value mapped = get_attribute_path(item, attribute);
        if (mapped.is_undefined() && fallback) mapped = *fallback;
        out.push_back(std::move(mapped));
      }
    } else {
      if (!arguments.positional[0].is_string()) throw_render_error("map: the filter name must be a string");
      const std::string filter = arguments.positional[0].string();
      if (!is_known_filter(filter)) throw_render_error("map: no filter named '{}'", filter);
      for (const auto& item : iterate(value)) {
        CallArguments filter_arguments;
        filter_arguments.positional.assign(arguments.positional.begin() + 1, arguments.positional.end());
        filter_arguments.keyword = arguments.keyword;
        out.push_back(apply_filter(filter, item, filter_arguments));
      }
    }
    return Value::list(std::move(out), Array::Kind::generator);
  }
  if (name == "select") return filter_by_test(value, arguments, false, true);
  if (name == "reject") return filter_by_test(value, arguments, false, false);
  if (name == "selectattr") return filter_by_test(value, arguments, true, true);
  if (name == "rejectattr") return filter_by_test(value, arguments, true, false);
  if (name == "attr") {
    const Signature sig(name, arguments, {"name"});
    return get_attribute(value, sig.string(0, ""));
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    const bool is_sort = name == "sort";
    const Signature sig(name, arguments, is_sort ? std::vector<std::string_view>{"reverse", "case_sensitive", "attribute"}
                                                 : std::vector<std::string_view>{"case_sensitive", "attribute"});
    const bool reverse = is_sort && sig.flag(0, false);
    const bool case_sensitive = sig.flag(is_sort ? 1 : 0, false);
    const std::optional<std::string> attribute = sig.optional_string(is_sort ? 2 : 1);
    std::vector<Value> items = iterate(value);
    const auto key = [&](const Value& item) { return sort_key(attribute_or_self(item, attribute), case_sensitive); };
    if (name == "unique") {
      std::vector<Value> out;
      std::vector<Value> seen;
      for (const auto& item : items) {
        const Value k = key(item);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) {
          seen.push_back(k);
          out.push_back(item);
        }
      }
      return Value::list(std::move(out), Array::Kind::generator);
    }
    if (is_sort) {
      std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
        return reverse ? less(key(b), key(a)) : less(key(a), key(b));
      });
      return Value::list(std::move(items));
    }
    if (items.empty()) return Value(Undefined{fmt::format("No aggregated item, sequence was empty.")});
    std::size_t best = 0;
    for (std::size_t i = 1; i < items.size(); ++i) {
      if (name == "min" ? less(key(items[i]), key(items[best])) : less(key(items[best]), key(items[i]))) best = i;
    }
    return items[best];
  }
  if (name == "sum") {
    const Signature sig(name, arguments, {"attribute", "start"});
    const std::optional<std::string> attribute = sig.optional_string(0);
    Value total = sig.get_or(1, Value(0));
    for (const auto& item : iterate(value)) {
      const Value term = attribute_or_self(item, attribute);
      if (!total.is_number() || !term.is_number()) {
        throw_render_error("unsupported operand type(s) for +: '{}' and '{}'", type_name(total), type_name(term));
      }
      total = total.is_float() || term.is_float() ? Value(total.as_double() + term.as_double()) : Value(total.as_int() + term.as_int());
    }
    return total;
  }
  throw_render_error("unknown filter '{}'", name);
}

}  // namespace verl::tokenizer::jinja::detail
