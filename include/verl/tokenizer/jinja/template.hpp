// A parsed Jinja template and its render entry point, plus the conversion of JSON documents
// (messages, tools, extra context) into engine values. Parsing happens once, in the constructor;
// rendering runs with jinja2's semantics as transformers configures it (see lexer.hpp).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "verl/tokenizer/jinja/interpreter.hpp"
#include "verl/tokenizer/jinja/lexer.hpp"
#include "verl/tokenizer/jinja/parser.hpp"

namespace verl::tokenizer::jinja {

using detail::Environment;

/// A JSON document (nlohmann::json or nlohmann::ordered_json) as an engine value: objects become
/// dicts (in the document's key order), arrays lists, numbers int or float.
template <class Json>
Value from_json(const Json& json, int depth = 0) {
  if (depth > 512) throw InvalidArgument("jinja: JSON value nested deeper than 512 levels");
  if (json.is_null()) return Value(None{});
  if (json.is_boolean()) return Value(json.template get<bool>());
  if (json.is_number_unsigned()) {
    const auto number = json.template get<std::uint64_t>();
    if (number > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      throw InvalidArgument(fmt::format("jinja: integer {} does not fit in 64 bits", number));
    }
    return Value(static_cast<std::int64_t>(number));
  }
  if (json.is_number_integer()) return Value(json.template get<std::int64_t>());
  if (json.is_number_float()) return Value(json.template get<double>());
  if (json.is_string()) return Value(json.template get<std::string>());
  if (json.is_array()) {
    std::vector<Value> items;
    items.reserve(json.size());
    for (const auto& item : json) items.push_back(from_json(item, depth + 1));
    return Value::list(std::move(items));
  }
  if (json.is_object()) {
    Object object;
    for (auto it = json.begin(); it != json.end(); ++it) object.items.emplace_back(it.key(), from_json(it.value(), depth + 1));
    return Value(std::move(object));
  }
  throw InvalidArgument(fmt::format("jinja: unsupported JSON value of type {}", json.type_name()));
}

class Template {
 public:
  /// Parses `source`; throws SyntaxError (an InvalidArgument) naming line, column and the
  /// expected construct.
  explicit Template(std::string_view source)
      : body_(std::make_shared<detail::Body>(detail::Parser(detail::Lexer(source).tokenize()).parse_template())) {}

  /// Renders with `context` as the template's variables. Runtime errors (undefined values used
  /// where jinja2 raises, type errors, raise_exception) throw RenderError naming the line.
  [[nodiscard]] std::string render(const Object& context, const Environment& environment = {}) const {
    detail::Interpreter interpreter(environment);
    const auto root = interpreter.make_root_scope(context);
    std::string out;
    interpreter.render(*body_, root, out);
    return out;
  }

 private:
  std::shared_ptr<const detail::Body> body_;  // shared: copies of a Template reuse the parse
};

}  // namespace verl::tokenizer::jinja
