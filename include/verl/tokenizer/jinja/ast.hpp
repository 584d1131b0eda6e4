// The syntax tree the parser builds and the interpreter walks: expressions and statements, each
// remembering the line of the template it came from (runtime errors name it).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "verl/tokenizer/jinja/value.hpp"

namespace verl::tokenizer::jinja::detail {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct LiteralExpr {
  Value value;
};
struct NameExpr {
  std::string name;
};
struct ListExpr {
  std::vector<ExprPtr> items;
  bool tuple = false;
};
struct DictExpr {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
enum class UnaryOp { logical_not, negate, plus };
struct UnaryExpr {
  UnaryOp op;
  ExprPtr operand;
};
enum class BinaryOp { logical_and, logical_or, add, subtract, multiply, divide, floor_divide, modulo, power, concat };
struct BinaryExpr {
  BinaryOp op;
  ExprPtr left;
  ExprPtr right;
};
enum class CompareOp { eq, ne, lt, le, gt, ge, in, not_in };
/// a < b <= c, chained as in Python.
struct CompareExpr {
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};
/// `then if condition else otherwise`; without `else` a false condition gives Undefined.
struct ConditionalExpr {
  ExprPtr condition;
  ExprPtr then;
  ExprPtr otherwise;
};
struct AttributeExpr {
  ExprPtr object;
  std::string name;
};
struct ItemExpr {
  ExprPtr object;
  ExprPtr index;
};
struct SliceExpr {
  ExprPtr object;
  ExprPtr start;
  ExprPtr stop;
  ExprPtr step;
};
struct CallExpr {
  ExprPtr callee;
  Arguments arguments;
};
/// operand | name(arguments). A filter block's filters have no operand (the block's output is it).
struct FilterExpr {
  ExprPtr operand;
  std::string name;
  Arguments arguments;
};
/// operand is [not] name(arguments).
struct TestExpr {
  ExprPtr operand;
  std::string name;
  Arguments arguments;
  bool negated = false;
};

struct Expr {
  std::variant<LiteralExpr, NameExpr, ListExpr, DictExpr, UnaryExpr, BinaryExpr, CompareExpr, ConditionalExpr,
               AttributeExpr, ItemExpr, SliceExpr, CallExpr, FilterExpr, TestExpr>
      node;
  int line = 0;
};

/// Where `set` / `for` store: names (several for tuple unpacking) or one namespace attribute.
struct AssignTarget {
  std::vector<std::string> names;
  std::string namespace_attribute;  // non-empty for `set ns.attr = ...` (names holds the namespace)
};

struct TextStmt {
  std::string text;
};
struct OutputStmt {
  ExprPtr value;
};
struct IfStmt {
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body otherwise;
};
struct ForStmt {
  AssignTarget target;
  ExprPtr iterable;
  ExprPtr filter;  // `for x in xs if cond`
  Body body;
  Body otherwise;
};
struct SetStmt {
  AssignTarget target;
  ExprPtr value;
};
/// {% set name %}...{% endset %}, optionally piped through filters.
struct SetBlockStmt {
  AssignTarget target;
  std::vector<ExprPtr> filters;
  Body body;
};
struct MacroParameter {
  std::string name;
  ExprPtr default_value;
};
struct MacroStmt {
  std::string name;
  std::vector<MacroParameter> parameters;
  std::shared_ptr<Body> body;  // shared with the macro values the interpreter creates
};
struct FilterBlockStmt {
  std::vector<ExprPtr> filters;
  Body body;
};
struct WithStmt {
  std::vector<std::pair<AssignTarget, ExprPtr>> assignments;
  Body body;
};
struct BreakStmt {};
struct ContinueStmt {};

struct Stmt {
  std::variant<TextStmt, OutputStmt, IfStmt, ForStmt, SetStmt, SetBlockStmt, MacroStmt, FilterBlockStmt, WithStmt,
               BreakStmt, ContinueStmt>
      node;
  int line = 0;
};

}  // namespace verl::tokenizer::jinja::detail
