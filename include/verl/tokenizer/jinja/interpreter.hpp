// Walks the syntax tree with jinja2's runtime semantics: scopes (a for-loop iteration, a macro
// call and a with block each get their own; if does not), the loop object, macros, namespaces,
// Python operators and jinja2's Undefined.
#pragma once

#include <cmath>
#include <cstdint>
#include <ctime>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "verl/tokenizer/jinja/ast.hpp"
#include "verl/tokenizer/jinja/filters.hpp"

namespace verl::tokenizer::jinja::detail {

/// One frame of variables; lookups fall through to the parent.
struct Scope {
  explicit Scope(std::shared_ptr<Scope> parent_scope = nullptr) : parent(std::move(parent_scope)) {}
  [[nodiscard]] const Value* find(const std::string& name) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->parent.get()) {
      if (const auto found = scope->variables.find(name); found != scope->variables.end()) return &found->second;
    }
    return nullptr;
  }
  void set(const std::string& name, Value value) { variables[name] = std::move(value); }

  std::unordered_map<std::string, Value> variables;
  std::shared_ptr<Scope> parent;
};
using ScopePtr = std::shared_ptr<Scope>;

inline constexpr std::string_view render_error_prefix = "jinja template error at line ";

class Interpreter {
 public:
  /// Macro calls nested deeper than this raise instead of exhausting the stack (Python's own
  /// recursion limit stops jinja2 at a similar depth).
  static constexpr int max_call_depth = 100;
  static constexpr std::int64_t max_range = 100000;  // jinja2's sandbox limit

  explicit Interpreter(const Environment& environment) : environment_(environment) {}

  /// The globals frame (range, namespace, dict, raise_exception, strftime_now) with the render
  /// context's variables in a frame above it.
  ScopePtr make_root_scope(const Object& context) {
    auto globals = std::make_shared<Scope>();
    install_globals(*globals);
    auto root = std::make_shared<Scope>(globals);
    for (const auto& [name, value] : context.items) root->set(name, value);
    return root;
  }

  void render(const Body& body, const ScopePtr& scope, std::string& out) {
    if (exec_body(body, scope, out) != Flow::normal) throw_render_error("break/continue outside of a loop");
  }

 private:
  enum class Flow { normal, break_loop, continue_loop };

  // ---- statements --------------------------------------------------------------------------------

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const auto& stmt : body) {
      const Flow flow = exec(*stmt, scope, out);
      if (flow != Flow::normal) return flow;
    }
    return Flow::normal;
  }

  Flow exec(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
    try {
      return std::visit([&](const auto& node) { return exec_node(node, scope, out); }, stmt.node);
    } catch (const RenderError& error) {
      const std::string_view message = error.what();
      if (message.starts_with(render_error_prefix)) throw;
      throw RenderError(fmt::format("{}{}: {}", render_error_prefix, stmt.line, message));
    }
  }

  Flow exec_node(const TextStmt& node, const ScopePtr&, std::string& out) {
    out += node.text;
    return Flow::normal;
  }

  Flow exec_node(const OutputStmt& node, const ScopePtr& scope, std::string& out) {
    out += to_string(eval(*node.value, scope));
    return Flow::normal;
  }

  Flow exec_node(const IfStmt& node, const ScopePtr& scope, std::string& out) {
    for (const auto& [condition, body] : node.branches) {
      if (truthy(eval(*condition, scope))) return exec_body(body, scope, out);
    }
    return exec_body(node.otherwise, scope, out);
  }

  Flow exec_node(const ForStmt& node, const ScopePtr& scope, std::string& out) {
    const Value iterable = eval(*node.iterable, scope);
    if (iterable.is_none() || iterable.is_number() || iterable.is_callable() || iterable.is_namespace()) {
      throw_render_error("'{}' object is not iterable", type_name(iterable));
    }
    std::vector<Value> items = iterate(iterable);
    if (node.filter) {
      std::vector<Value> kept;
      for (auto& item : items) {
        auto probe = std::make_shared<Scope>(scope);
        assign(node.target, item, *probe);
        if (truthy(eval(*node.filter, probe))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const auto count = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < count; ++i) {
      auto iteration = std::make_shared<Scope>(scope);
      assign(node.target, items[static_cast<std::size_t>(i)], *iteration);
      iteration->set("loop", loop_object(items, i));
      const Flow flow = exec_body(node.body, iteration, out);
      if (flow == Flow::break_loop) break;
    }
    if (count == 0) return exec_body(node.otherwise, scope, out);
    return Flow::normal;
  }

  static Value loop_object(const std::vector<Value>& items, std::int64_t i) {
    const auto count = static_cast<std::int64_t>(items.size());
    Object loop;
    loop.set("index", Value(i + 1));
    loop.set("index0", Value(i));
    loop.set("revindex", Value(count - i));
    loop.set("revindex0", Value(count - i - 1));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == count - 1));
    loop.set("length", Value(count));
    loop.set("depth", Value(1));
    loop.set("depth0", Value(0));
    if (i > 0) loop.set("previtem", items[static_cast<std::size_t>(i - 1)]);
    if (i + 1 < count) loop.set("nextitem", items[static_cast<std::size_t>(i + 1)]);
    loop.set("cycle", make_function("loop.cycle", [i](CallArguments& arguments) {
               if (arguments.positional.empty()) throw_render_error("no items for cycling given");
               return arguments.positional[static_cast<std::size_t>(i) % arguments.positional.size()];
             }));
    return Value(std::move(loop));
  }

  Flow exec_node(const SetStmt& node, const ScopePtr& scope, std::string&) {
    Value value = eval(*node.value, scope);
    if (!node.target.namespace_attribute.empty()) {
      const Value* ns = scope->find(node.target.names[0]);
      if (ns == nullptr || !ns->is_namespace()) {
        throw_render_error("cannot assign attribute on non-namespace object '{}'", node.target.names[0]);
      }
      ns->ns().attributes.set(node.target.namespace_attribute, std::move(value));
      return Flow::normal;
    }
    assign(node.target, value, *scope);
    return Flow::normal;
  }

  Flow exec_node(const SetBlockStmt& node, const ScopePtr& scope, std::string&) {
    std::string captured;
    if (exec_body(node.body, scope, captured) != Flow::normal) throw_render_error("break/continue inside a set block");
    Value value(std::move(captured));
    for (const auto& filter : node.filters) value = apply_filter_expr(*filter, value, scope);
    assign(node.target, value, *scope);
    return Flow::normal;
  }

  Flow exec_node(const FilterBlockStmt& node, const ScopePtr& scope, std::string& out) {
    std::string captured;
    const Flow flow = exec_body(node.body, scope, captured);
    Value value(std::move(captured));
    for (const auto& filter : node.filters) value = apply_filter_expr(*filter, value, scope);
    out += to_string(value);
    return flow;
  }

  Flow exec_node(const WithStmt& node, const ScopePtr& scope, std::string& out) {
    auto inner = std::make_shared<Scope>(scope);
    for (const auto& [target, value] : node.assignments) assign(target, eval(*value, scope), *inner);
    return exec_body(node.body, inner, out);
  }

  Flow exec_node(const BreakStmt&, const ScopePtr&, std::string&) { return Flow::break_loop; }
  Flow exec_node(const ContinueStmt&, const ScopePtr&, std::string&) { return Flow::continue_loop; }

  Flow exec_node(const MacroStmt& node, const ScopePtr& scope, std::string&) {
    scope->set(node.name, make_macro(node, scope));
    return Flow::normal;
  }

  Value make_macro(const MacroStmt& node, const ScopePtr& defining_scope) {
    // The macro refers to its node in the Template's tree and to this interpreter (macros never
    // outlive a render). It holds its defining scope weakly, since that scope usually stores the
    // macro itself; the interpreter keeps the scope alive until the render ends.
    macro_scopes_.push_back(defining_scope);
    return make_function(node.name, [this, &node, weak_scope = std::weak_ptr<Scope>(defining_scope)](CallArguments& arguments) {
      if (call_depth_ >= max_call_depth) {
        throw_render_error("macro '{}': calls nested deeper than {} levels", node.name, max_call_depth);
      }
      if (arguments.positional.size() > node.parameters.size()) {
        throw_render_error("macro '{}' takes not more than {} argument(s)", node.name, node.parameters.size());
      }
      auto frame = std::make_shared<Scope>(weak_scope.lock());
      for (const auto& [name, value] : arguments.keyword) {
        const bool known = std::any_of(node.parameters.begin(), node.parameters.end(),
                                       [&](const MacroParameter& p) { return p.name == name; });
        if (!known) throw_render_error("macro '{}' takes no keyword argument '{}'", node.name, name);
      }
      for (std::size_t i = 0; i < node.parameters.size(); ++i) {
        const MacroParameter& parameter = node.parameters[i];
        if (i < arguments.positional.size()) {
          frame->set(parameter.name, arguments.positional[i]);
          continue;
        }
        const auto keyword = std::find_if(arguments.keyword.begin(), arguments.keyword.end(),
                                          [&](const auto& entry) { return entry.first == parameter.name; });
        if (keyword != arguments.keyword.end()) {
          frame->set(parameter.name, keyword->second);
        } else if (parameter.default_value) {
          frame->set(parameter.name, eval(*parameter.default_value, frame));
        } else {
          frame->set(parameter.name, Value(Undefined{fmt::format("parameter '{}' was not provided", parameter.name)}));
        }
      }
      std::string out;
      ++call_depth_;
      try {
        render(*node.body, frame, out);
      } catch (...) {
        --call_depth_;
        throw;
      }
      --call_depth_;
      return Value(std::move(out));
    });
  }

  /// Binds `value` to a name, or unpacks it over several names.
  static void assign(const AssignTarget& target, const Value& value, Scope& scope) {
    if (target.names.size() == 1) {
      scope.set(target.names[0], value);
      return;
    }
    if (value.is_undefined()) fail_undefined(value);
    const std::vector<Value> items = iterate(value);
    if (items.size() < target.names.size()) {
      throw_render_error("not enough values to unpack (expected {}, got {})", target.names.size(), items.size());
    }
    if (items.size() > target.names.size()) throw_render_error("too many values to unpack (expected {})", target.names.size());
    for (std::size_t i = 0; i < items.size(); ++i) scope.set(target.names[i], items[i]);
  }

  // ---- expressions -------------------------------------------------------------------------------

  Value eval(const Expr& expr, const ScopePtr& scope) {
    return std::visit([&](const auto& node) { return eval_node(node, expr, scope); }, expr.node);
  }

  Value eval_node(const LiteralExpr& node, const Expr&, const ScopePtr&) { return node.value; }

  Value eval_node(const NameExpr& node, const Expr&, const ScopePtr& scope) {
    if (const Value* found = scope->find(node.name)) return *found;
    return Value(Undefined{fmt::format("'{}' is undefined", node.name)});
  }

  Value eval_node(const ListExpr& node, const Expr&, const ScopePtr& scope) {
    std::vector<Value> items;
    items.reserve(node.items.size());
    for (const auto& item : node.items) items.push_back(eval(*item, scope));
    return Value::list(std::move(items), node.tuple ? Array::Kind::tuple : Array::Kind::list);
  }

  Value eval_node(const DictExpr& node, const Expr&, const ScopePtr& scope) {
    Object object;
    for (const auto& [key_expr, value_expr] : node.items) {
      const Value key = eval(*key_expr, scope);
      if (!key.is_string()) throw_render_error("dict literal keys must be strings here, got {}", type_name(key));
      object.set(key.string(), eval(*value_expr, scope));
    }
    return Value(std::move(object));
  }

  Value eval_node(const UnaryExpr& node, const Expr&, const ScopePtr& scope) {
    const Value operand = eval(*node.operand, scope);
    if (node.op == UnaryOp::logical_not) return Value(!truthy(operand));
    if (operand.is_undefined()) fail_undefined(operand);
    if (!operand.is_number()) {
      throw_render_error("bad operand type for unary {}: '{}'", node.op == UnaryOp::negate ? "-" : "+", type_name(operand));
    }
    if (operand.is_float()) return Value(node.op == UnaryOp::negate ? -operand.floating() : operand.floating());
    const std::int64_t number = operand.as_int();
    if (node.op == UnaryOp::negate) {
      if (number == std::numeric_limits<std::int64_t>::min()) throw_render_error("integer overflow");
      return Value(-number);
    }
    return Value(number);
  }

  Value eval_node(const BinaryExpr& node, const Expr&, const ScopePtr& scope) {
    if (node.op == BinaryOp::logical_and || node.op == BinaryOp::logical_or) {
      Value left = eval(*node.left, scope);  // Python returns the deciding operand, not a bool
      if (truthy(left) == (node.op == BinaryOp::logical_or)) return left;
      return eval(*node.right, scope);
    }
    const Value left = eval(*node.left, scope);
    const Value right = eval(*node.right, scope);
    if (node.op == BinaryOp::concat) return Value(to_string(left) + to_string(right));
    return arithmetic(node.op, left, right);
  }

  static std::string_view operator_symbol(BinaryOp op) {
    switch (op) {
      case BinaryOp::add: return "+";
      case BinaryOp::subtract: return "-";
      case BinaryOp::multiply: return "*";
      case BinaryOp::divide: return "/";
      case BinaryOp::floor_divide: return "//";
      case BinaryOp::modulo: return "%";
      case BinaryOp::power: return "**";
      default: return "?";
    }
  }

  static void check_overflow(bool overflow) {
    if (overflow) throw_render_error("integer overflow (values beyond 64 bits are not supported)");
  }

  static Value repeat(const Value& sequence, std::int64_t times) {
    if (sequence.is_string()) {
      std::string out;
      for (std::int64_t i = 0; i < times; ++i) out += sequence.string();
      return Value(std::move(out));
    }
    std::vector<Value> out;
    for (std::int64_t i = 0; i < times; ++i) out.insert(out.end(), sequence.array().items.begin(), sequence.array().items.end());
    return Value::list(std::move(out), sequence.array().kind);
  }

  static Value arithmetic(BinaryOp op, const Value& left, const Value& right) {
    if (left.is_undefined()) fail_undefined(left);
    if (right.is_undefined()) fail_undefined(right);
    const auto unsupported = [&]() -> Value {
      if (op == BinaryOp::add && left.is_string()) {
        throw_render_error("can only concatenate str (not \"{}\") to str", type_name(right));
      }
      if (op == BinaryOp::add && left.is_sequence_array()) {
        throw_render_error("can only concatenate {} (not \"{}\") to {}", type_name(left), type_name(right), type_name(left));
      }
      throw_render_error("unsupported operand type(s) for {}: '{}' and '{}'", operator_symbol(op), type_name(left),
                         type_name(right));
    };
    if (left.is_number() && right.is_number()) {
      const bool floating = left.is_float() || right.is_float();
      if (!floating) {
        const std::int64_t a = left.as_int();
        const std::int64_t b = right.as_int();
        std::int64_t result = 0;
        switch (op) {
          case BinaryOp::add: check_overflow(__builtin_add_overflow(a, b, &result)); return Value(result);
          case BinaryOp::subtract: check_overflow(__builtin_sub_overflow(a, b, &result)); return Value(result);
          case BinaryOp::multiply: check_overflow(__builtin_mul_overflow(a, b, &result)); return Value(result);
          case BinaryOp::divide:
            if (b == 0) throw_render_error("division by zero");
            return Value(static_cast<double>(a) / static_cast<double>(b));
          case BinaryOp::floor_divide:
          case BinaryOp::modulo: {
            if (b == 0) throw_render_error("integer division or modulo by zero");
            if (a == std::numeric_limits<std::int64_t>::min() && b == -1) throw_render_error("integer overflow");
            std::int64_t quotient = a / b;
            std::int64_t remainder = a % b;
            if (remainder != 0 && ((remainder < 0) != (b < 0))) {
              --quotient;
              remainder += b;
            }
            return Value(op == BinaryOp::floor_divide ? quotient : remainder);
          }
          case BinaryOp::power: {
            if (b < 0) return Value(std::pow(static_cast<double>(a), static_cast<double>(b)));
            std::int64_t power = 1;
            std::int64_t base = a;
            for (std::int64_t exponent = b; exponent > 0; exponent >>= 1) {  // square and multiply
              if ((exponent & 1) != 0) check_overflow(__builtin_mul_overflow(power, base, &power));
              if (exponent > 1) check_overflow(__builtin_mul_overflow(base, base, &base));
            }
            return Value(power);
          }
          default: break;
        }
      }
      const double a = left.as_double();
      const double b = right.as_double();
      switch (op) {
        case BinaryOp::add: return Value(a + b);
        case BinaryOp::subtract: return Value(a - b);
        case BinaryOp::multiply: return Value(a * b);
        case BinaryOp::divide:
          if (b == 0) throw_render_error("float division by zero");
          return Value(a / b);
        case BinaryOp::floor_divide:
        case BinaryOp::modulo: {
          // CPython's float_floor_div / float_rem
          if (b == 0) throw_render_error("float {} by zero", op == BinaryOp::modulo ? "modulo" : "floor division");
          double remainder = std::fmod(a, b);
          double quotient = (a - remainder) / b;
          if (remainder != 0) {
            if ((b < 0) != (remainder < 0)) {
              remainder += b;
              quotient -= 1.0;
            }
          } else {
            remainder = std::copysign(0.0, b);
          }
          if (op == BinaryOp::modulo) return Value(remainder);
          if (quotient == 0) return Value(std::copysign(0.0, a / b));
          double floored = std::floor(quotient);
          if (quotient - floored > 0.5) floored += 1.0;
          return Value(floored);
        }
        case BinaryOp::power: return Value(std::pow(a, b));
        default: break;
      }
    }
    if (op == BinaryOp::add) {
      if (left.is_string() && right.is_string()) return Value(left.string() + right.string());
      if (left.is_sequence_array() && right.is_sequence_array() && left.array().kind == right.array().kind) {
        std::vector<Value> items = left.array().items;
        items.insert(items.end(), right.array().items.begin(), right.array().items.end());
        return Value::list(std::move(items), left.array().kind);
      }
    }
    if (op == BinaryOp::multiply) {
      if ((left.is_string() || left.is_sequence_array()) && (right.is_int() || right.is_bool())) return repeat(left, right.as_int());
      if ((right.is_string() || right.is_sequence_array()) && (left.is_int() || left.is_bool())) return repeat(right, left.as_int());
    }
    if (op == BinaryOp::modulo && left.is_string()) {
      throw_render_error("printf-style formatting ('...' % values) is not supported by this chat-template engine");
    }
    return unsupported();
  }

  Value eval_node(const CompareExpr& node, const Expr&, const ScopePtr& scope) {
    Value left = eval(*node.first, scope);
    for (const auto& [op, right_expr] : node.rest) {
      Value right = eval(*right_expr, scope);
      bool holds = false;
      switch (op) {
        case CompareOp::eq: holds = equal(left, right); break;
        case CompareOp::ne: holds = !equal(left, right); break;
        case CompareOp::lt: holds = less(left, right, "<"); break;
        case CompareOp::le: holds = less(left, right, "<=") || equal(left, right); break;
        case CompareOp::gt: holds = less(right, left, ">"); break;
        case CompareOp::ge: holds = less(right, left, ">=") || equal(left, right); break;
        case CompareOp::in: holds = contains(right, left); break;
        case CompareOp::not_in: holds = !contains(right, left); break;
      }
      if (!holds) return Value(false);
      left = std::move(right);
    }
    return Value(true);
  }

  Value eval_node(const ConditionalExpr& node, const Expr& expr, const ScopePtr& scope) {
    if (truthy(eval(*node.condition, scope))) return eval(*node.then, scope);
    if (node.otherwise) return eval(*node.otherwise, scope);
    return Value(Undefined{fmt::format(
        "the inline if-expression on line {} evaluated to false and no else section was defined.", expr.line)});
  }

  Value eval_node(const AttributeExpr& node, const Expr&, const ScopePtr& scope) {
    return get_attribute(eval(*node.object, scope), node.name);
  }

  Value eval_node(const ItemExpr& node, const Expr&, const ScopePtr& scope) {
    const Value object = eval(*node.object, scope);
    return get_item(object, eval(*node.index, scope));
  }

  std::optional<std::int64_t> slice_bound(const ExprPtr& bound, const ScopePtr& scope) {
    if (!bound) return std::nullopt;
    const Value value = eval(*bound, scope);
    if (value.is_none()) return std::nullopt;
    if (!value.is_int() && !value.is_bool()) {
      throw_render_error("slice indices must be integers or None, got {}", type_name(value));
    }
    return value.as_int();
  }

  Value eval_node(const SliceExpr& node, const Expr&, const ScopePtr& scope) {
    const Value object = eval(*node.object, scope);
    const auto start = slice_bound(node.start, scope);
    const auto stop = slice_bound(node.stop, scope);
    const auto step = slice_bound(node.step, scope);
    return slice(object, start, stop, step);
  }

  CallArguments eval_arguments(const Arguments& arguments, const ScopePtr& scope) {
    CallArguments out;
    for (const auto& positional : arguments.positional) out.positional.push_back(eval(*positional, scope));
    for (const auto& [name, value] : arguments.keyword) out.keyword.emplace_back(name, eval(*value, scope));
    return out;
  }

  Value eval_node(const CallExpr& node, const Expr&, const ScopePtr& scope) {
    const Value callee = eval(*node.callee, scope);
    CallArguments arguments = eval_arguments(node.arguments, scope);
    return call_value(callee, arguments);
  }

  Value apply_filter_expr(const Expr& filter_expr, const Value& operand, const ScopePtr& scope) {
    const auto& filter = std::get<FilterExpr>(filter_expr.node);
    CallArguments arguments = eval_arguments(filter.arguments, scope);
    return apply_filter(filter.name, operand, arguments);
  }

  Value eval_node(const FilterExpr& node, const Expr& expr, const ScopePtr& scope) {
    return apply_filter_expr(expr, eval(*node.operand, scope), scope);
  }

  Value eval_node(const TestExpr& node, const Expr&, const ScopePtr& scope) {
    const Value operand = eval(*node.operand, scope);
    CallArguments arguments = eval_arguments(node.arguments, scope);
    return Value(apply_test(node.name, operand, arguments) != node.negated);
  }

  // ---- globals ---------------------------------------------------------------------------------------

  void install_globals(Scope& globals) {
    globals.set("range", make_function("range", [](CallArguments& arguments) {
                  if (!arguments.keyword.empty()) throw_render_error("range() takes no keyword arguments");
                  std::vector<std::int64_t> bounds;
                  for (const auto& argument : arguments.positional) {
                    if (!argument.is_int() && !argument.is_bool()) {
                      throw_render_error("'{}' object cannot be interpreted as an integer", type_name(argument));
                    }
                    bounds.push_back(argument.as_int());
                  }
                  if (bounds.empty() || bounds.size() > 3) throw_render_error("range expected 1 to 3 arguments, got {}", bounds.size());
                  const std::int64_t start = bounds.size() == 1 ? 0 : bounds[0];
                  const std::int64_t stop = bounds.size() == 1 ? bounds[0] : bounds[1];
                  const std::int64_t step = bounds.size() == 3 ? bounds[2] : 1;
                  if (step == 0) throw_render_error("range() arg 3 must not be zero");
                  std::vector<Value> items;
                  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                    if (static_cast<std::int64_t>(items.size()) >= max_range) {
                      throw_render_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", max_range);
                    }
                    items.emplace_back(i);
                  }
                  return Value::list(std::move(items));
                }));
    globals.set("namespace", make_function("namespace", [](CallArguments& arguments) {
                  auto ns = std::make_shared<Namespace>();
                  for (const auto& positional : arguments.positional) {
                    if (!positional.is_object()) throw_render_error("namespace() positional argument must be a dict");
                    for (const auto& [key, value] : positional.object().items) ns->attributes.set(key, value);
                  }
                  for (const auto& [key, value] : arguments.keyword) ns->attributes.set(key, value);
                  return Value(std::move(ns));
                }));
    globals.set("dict", make_function("dict", [](CallArguments& arguments) {
                  Object object;
                  for (const auto& positional : arguments.positional) {
                    if (!positional.is_object()) throw_render_error("dict() positional argument must be a dict");
                    for (const auto& [key, value] : positional.object().items) object.set(key, value);
                  }
                  for (const auto& [key, value] : arguments.keyword) object.set(key, value);
                  return Value(std::move(object));
                }));
    // transformers' globals
    globals.set("raise_exception", make_function("raise_exception", [](CallArguments& arguments) -> Value {
                  const Signature sig("raise_exception", arguments, {"message"});
                  throw RenderError(to_string(sig.required(0)));
                }));
    globals.set("strftime_now", make_function("strftime_now", [this](CallArguments& arguments) {
                  const Signature sig("strftime_now", arguments, {"format"});
                  const std::string format = sig.string(0, "");
                  std::tm now{};
                  if (environment_.now) {
                    now = *environment_.now;
                  } else {
                    const std::time_t seconds = std::time(nullptr);
                    localtime_r(&seconds, &now);
                  }
                  if (format.empty()) return Value(std::string());
                  std::string buffer(256 + format.size() * 16, '\0');
                  const std::size_t written = std::strftime(buffer.data(), buffer.size(), format.c_str(), &now);
                  buffer.resize(written);
                  return Value(std::move(buffer));
                }));
  }

  const Environment& environment_;
  int call_depth_ = 0;
  std::vector<ScopePtr> macro_scopes_;  // scopes that define macros, kept until the render ends
};

}  // namespace verl::tokenizer::jinja::detail
