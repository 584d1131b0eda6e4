// The Jinja parser: tokens to the syntax tree, with jinja2's grammar and operator precedence.
// Everything it cannot run faithfully (template inheritance, includes, imports, call blocks,
// recursive loops, unknown filters and tests) fails here, naming the construct, rather than
// rendering something different from jinja2.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/tokenizer/jinja/ast.hpp"
#include "verl/tokenizer/jinja/builtins.hpp"
#include "verl/tokenizer/jinja/lexer.hpp"

namespace verl::tokenizer::jinja::detail {

class Parser {
 public:
  /// Deeper nesting than this (of expressions or blocks) is refused, so a hostile template cannot
  /// overflow the stack.
  static constexpr int max_depth = 256;

  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse_template() {
    Body body = parse_body({});
    if (current().kind != TokenKind::end_of_template) fail_expected("end of template");
    return body;
  }

 private:
  // ---- token helpers ---------------------------------------------------------------------------
  [[nodiscard]] const Token& current() const { return tokens_[position_]; }
  [[nodiscard]] const Token& peek(std::size_t ahead = 1) const {
    return tokens_[std::min(position_ + ahead, tokens_.size() - 1)];
  }
  const Token& advance() {
    const Token& token = tokens_[position_];
    if (position_ + 1 < tokens_.size()) ++position_;
    return token;
  }
  [[nodiscard]] bool at_op(std::string_view op) const {
    return current().kind == TokenKind::op && current().value == op;
  }
  [[nodiscard]] bool at_name(std::string_view name) const {
    return current().kind == TokenKind::name && current().value == name;
  }
  bool accept_op(std::string_view op) {
    if (!at_op(op)) return false;
    advance();
    return true;
  }
  bool accept_name(std::string_view name) {
    if (!at_name(name)) return false;
    advance();
    return true;
  }
  [[noreturn]] void fail_expected(std::string_view expected) const {
    throw_syntax_error(current().line, current().column, "expected {}, got {}", expected, describe(current()));
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) fail_expected(fmt::format("'{}'", op));
  }
  std::string expect_name(std::string_view what) {
    if (current().kind != TokenKind::name) fail_expected(what);
    return advance().value;
  }
  void expect_block_end(std::string_view tag) {
    if (current().kind != TokenKind::block_end) fail_expected(fmt::format("'%}}' to close the '{}' tag", tag));
    advance();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& owner) : parser(owner) {
      if (++parser.depth_ > max_depth) {
        throw_syntax_error(parser.current().line, parser.current().column,
                           "template nested deeper than {} levels (expressions or blocks)", max_depth);
      }
    }
    ~DepthGuard() { --parser.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
    Parser& parser;
  };

  /// Each operator of a chain (a + b + c, a.b.c, x | f | g) deepens the tree by one level: count it
  /// against max_depth too, restoring the depth when the chain ends.
  struct ChainGuard {
    explicit ChainGuard(Parser& owner) : parser(owner), saved(owner.depth_) {}
    ~ChainGuard() { parser.depth_ = saved; }
    ChainGuard(const ChainGuard&) = delete;
    ChainGuard& operator=(const ChainGuard&) = delete;
    void step() {
      if (++parser.depth_ > max_depth) {
        throw_syntax_error(parser.current().line, parser.current().column,
                           "template nested deeper than {} levels (expressions or blocks)", max_depth);
      }
    }
    Parser& parser;
    int saved;
  };

  template <class Node>
  ExprPtr make_expr(Node node, int line) {
    auto expr = std::make_unique<Expr>();
    expr->node = std::move(node);
    expr->line = line;
    return expr;
  }
  template <class Node>
  StmtPtr make_stmt(Node node, int line) {
    auto stmt = std::make_unique<Stmt>();
    stmt->node = std::move(node);
    stmt->line = line;
    return stmt;
  }

  // ---- statements ------------------------------------------------------------------------------

  /// Parses until a block tag named in `end_tags` (left unconsumed, after its '{%') or the end of
  /// the template.
  Body parse_body(const std::vector<std::string_view>& end_tags) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& token = current();
      if (token.kind == TokenKind::end_of_template) {
        if (!end_tags.empty()) {
          throw_syntax_error(token.line, token.column, "unexpected end of template, expected {} to close the '{}' block",
                             join_tags(end_tags), open_blocks_.empty() ? "?" : open_blocks_.back());
        }
        return body;
      }
      if (token.kind == TokenKind::data) {
        body.push_back(make_stmt(TextStmt{token.value}, token.line));
        advance();
      } else if (token.kind == TokenKind::variable_begin) {
        advance();
        const int line = current().line;
        ExprPtr value = parse_tuple_expression();
        if (current().kind != TokenKind::variable_end) fail_expected("'}}'");
        advance();
        body.push_back(make_stmt(OutputStmt{std::move(value)}, line));
      } else if (token.kind == TokenKind::block_begin) {
        const Token& tag = peek();
        if (tag.kind == TokenKind::name &&
            std::find(end_tags.begin(), end_tags.end(), std::string_view(tag.value)) != end_tags.end()) {
          advance();  // leave the end tag's name current for the caller
          return body;
        }
        advance();
        body.push_back(parse_statement(end_tags));
      } else {
        fail_expected("template text, '{{' or '{%'");
      }
    }
  }

  static std::string join_tags(const std::vector<std::string_view>& tags) {
    std::string out;
    for (std::size_t i = 0; i < tags.size(); ++i) out += (i > 0 ? " or '" : "'") + std::string(tags[i]) + "'";
    return out;
  }

  StmtPtr parse_statement(const std::vector<std::string_view>& enclosing_end_tags) {
    const Token& tag = current();
    if (tag.kind != TokenKind::name) fail_expected("a tag name after '{%'");
    const std::string name = tag.value;
    const int line = tag.line;
    const int column = tag.column;
    if (name == "if") return parse_if(line);
    if (name == "for") return parse_for(line);
    if (name == "set") return parse_set(line);
    if (name == "macro") return parse_macro(line);
    if (name == "filter") return parse_filter_block(line);
    if (name == "with") return parse_with(line);
    if (name == "generation") return parse_generation(line);
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) throw_syntax_error(line, column, "'{}' outside of a for loop", name);
      advance();
      expect_block_end(name);
      if (name == "break") return make_stmt(BreakStmt{}, line);
      return make_stmt(ContinueStmt{}, line);
    }
    if (name == "extends" || name == "block" || name == "include" || name == "import" || name == "from" ||
        name == "call" || name == "do" || name == "autoescape" || name == "trans" || name == "raw") {
      throw_syntax_error(line, column, "the '{}' tag is not supported by this chat-template engine", name);
    }
    if (!enclosing_end_tags.empty()) {
      throw_syntax_error(line, column, "unknown tag '{}', expected {} to close the '{}' block", name,
                         join_tags(enclosing_end_tags), open_blocks_.empty() ? "?" : open_blocks_.back());
    }
    throw_syntax_error(line, column, "unknown tag '{}'", name);
  }

  /// Parses a block body up to one of `end_tags`; returns which one ended it (its name consumed).
  std::string parse_block_body(Body& body, const std::vector<std::string_view>& end_tags) {
    body = parse_body(end_tags);
    return advance().value;
  }

  StmtPtr parse_if(int line) {
    advance();  // if
    open_blocks_.push_back("if");
    IfStmt stmt;
    ExprPtr condition = parse_expression();
    expect_block_end("if");
    while (true) {
      Body body;
      const std::string end = parse_block_body(body, {"elif", "else", "endif"});
      stmt.branches.emplace_back(std::move(condition), std::move(body));
      if (end == "elif") {
        condition = parse_expression();
        expect_block_end("elif");
        continue;
      }
      if (end == "else") {
        expect_block_end("else");
        parse_block_body(stmt.otherwise, {"endif"});
      }
      expect_block_end("endif");
      break;
    }
    open_blocks_.pop_back();
    return make_stmt(std::move(stmt), line);
  }

  AssignTarget parse_assign_target(bool allow_namespace_attribute) {
    AssignTarget target;
    const bool parenthesized = accept_op("(");
    target.names.push_back(expect_name("a variable name"));
    if (allow_namespace_attribute && !parenthesized && accept_op(".")) {
      target.namespace_attribute = expect_name("an attribute name after '.'");
      return target;
    }
    while (accept_op(",")) {
      if (current().kind != TokenKind::name) break;  // trailing comma
      target.names.push_back(advance().value);
    }
    if (parenthesized) expect_op(")");
    if (target.names.size() == 1 && !parenthesized) return target;
    target.namespace_attribute.clear();
    return target;
  }

  StmtPtr parse_for(int line) {
    advance();  // for
    open_blocks_.push_back("for");
    ForStmt stmt;
    stmt.target = parse_assign_target(false);
    if (!accept_name("in")) fail_expected("'in' after the loop variable(s)");
    stmt.iterable = parse_tuple_expression(/*allow_conditional=*/false);
    if (accept_name("if")) stmt.filter = parse_expression();
    if (at_name("recursive")) {
      throw_syntax_error(current().line, current().column, "recursive for loops are not supported");
    }
    expect_block_end("for");
    ++loop_depth_;
    const std::string end = parse_block_body(stmt.body, {"endfor", "else"});
    --loop_depth_;
    if (end == "else") {
      expect_block_end("else");
      parse_block_body(stmt.otherwise, {"endfor"});
    }
    expect_block_end("endfor");
    open_blocks_.pop_back();
    return make_stmt(std::move(stmt), line);
  }

  StmtPtr parse_set(int line) {
    advance();  // set
    AssignTarget target = parse_assign_target(true);
    if (accept_op("=")) {
      ExprPtr value = parse_tuple_expression();
      expect_block_end("set");
      return make_stmt(SetStmt{std::move(target), std::move(value)}, line);
    }
    if (!target.namespace_attribute.empty() || target.names.size() != 1) fail_expected("'=' after the set target");
    SetBlockStmt stmt;
    stmt.target = std::move(target);
    while (accept_op("|")) stmt.filters.push_back(parse_filter(nullptr));
    expect_block_end("set");
    open_blocks_.push_back("set");
    parse_block_body(stmt.body, {"endset"});
    expect_block_end("endset");
    open_blocks_.pop_back();
    return make_stmt(std::move(stmt), line);
  }

  StmtPtr parse_macro(int line) {
    advance();  // macro
    MacroStmt stmt;
    stmt.name = expect_name("the macro name");
    expect_op("(");
    while (!at_op(")")) {
      if (!stmt.parameters.empty()) expect_op(",");
      if (at_op(")")) break;
      MacroParameter parameter;
      parameter.name = expect_name("a macro parameter name");
      if (accept_op("=")) {
        parameter.default_value = parse_expression();
      } else if (std::any_of(stmt.parameters.begin(), stmt.parameters.end(),
                             [](const MacroParameter& p) { return p.default_value != nullptr; })) {
        throw_syntax_error(current().line, current().column, "non-default macro parameter '{}' follows a default one",
                           parameter.name);
      }
      stmt.parameters.push_back(std::move(parameter));
    }
    expect_op(")");
    expect_block_end("macro");
    open_blocks_.push_back("macro");
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;  // break/continue cannot cross a macro
    stmt.body = std::make_shared<Body>();
    parse_block_body(*stmt.body, {"endmacro"});
    loop_depth_ = saved_loop_depth;
    if (current().kind == TokenKind::name) advance();  // {% endmacro name %}
    expect_block_end("endmacro");
    open_blocks_.pop_back();
    return make_stmt(std::move(stmt), line);
  }

  StmtPtr parse_filter_block(int line) {
    advance();  // filter
    FilterBlockStmt stmt;
    stmt.filters.push_back(parse_filter(nullptr));
    while (accept_op("|")) stmt.filters.push_back(parse_filter(nullptr));
    expect_block_end("filter");
    open_blocks_.push_back("filter");
    parse_block_body(stmt.body, {"endfilter"});
    expect_block_end("endfilter");
    open_blocks_.pop_back();
    return make_stmt(std::move(stmt), line);
  }

  StmtPtr parse_with(int line) {
    advance();  // with
    WithStmt stmt;
    while (current().kind != TokenKind::block_end) {
      if (!stmt.assignments.empty()) expect_op(",");
      AssignTarget target = parse_assign_target(false);
      expect_op("=");
      stmt.assignments.emplace_back(std::move(target), parse_expression());
    }
    expect_block_end("with");
    open_blocks_.push_back("with");
    parse_block_body(stmt.body, {"endwith"});
    expect_block_end("endwith");
    open_blocks_.pop_back();
    return make_stmt(std::move(stmt), line);
  }

  /// transformers' {% generation %} tag (marks assistant text for masks): renders its body.
  StmtPtr parse_generation(int line) {
    advance();  // generation
    expect_block_end("generation");
    WithStmt stmt;
    open_blocks_.push_back("generation");
    parse_block_body(stmt.body, {"endgeneration"});
    expect_block_end("endgeneration");
    open_blocks_.pop_back();
    return make_stmt(std::move(stmt), line);
  }

  // ---- expressions -----------------------------------------------------------------------------

  /// An expression, or a tuple of them without parentheses (`{{ a, b }}`, `set x = 1, 2`).
  ExprPtr parse_tuple_expression(bool allow_conditional = true) {
    const int line = current().line;
    ExprPtr first = allow_conditional ? parse_expression() : parse_or();
    if (!at_op(",")) return first;
    ListExpr tuple;
    tuple.tuple = true;
    tuple.items.push_back(std::move(first));
    while (accept_op(",")) {
      if (!starts_expression()) break;
      tuple.items.push_back(allow_conditional ? parse_expression() : parse_or());
    }
    return make_expr(std::move(tuple), line);
  }

  [[nodiscard]] bool starts_expression() const {
    const Token& token = current();
    switch (token.kind) {
      case TokenKind::name:
      case TokenKind::string:
      case TokenKind::integer:
      case TokenKind::floating: return true;
      case TokenKind::op: return token.value == "(" || token.value == "[" || token.value == "{" || token.value == "-" || token.value == "+";
      default: return false;
    }
  }

  ExprPtr parse_expression() {
    DepthGuard guard(*this);
    const int line = current().line;
    ExprPtr then = parse_or();
    while (accept_name("if")) {
      ExprPtr condition = parse_or();
      ExprPtr otherwise;
      if (accept_name("else")) otherwise = parse_expression();
      then = make_expr(ConditionalExpr{std::move(condition), std::move(then), std::move(otherwise)}, line);
    }
    return then;
  }

  ExprPtr parse_or() {
    const int line = current().line;
    ExprPtr left = parse_and();
    ChainGuard chain(*this);
    while (accept_name("or") && (chain.step(), true)) left = make_expr(BinaryExpr{BinaryOp::logical_or, std::move(left), parse_and()}, line);
    return left;
  }

  ExprPtr parse_and() {
    const int line = current().line;
    ExprPtr left = parse_not();
    ChainGuard chain(*this);
    while (accept_name("and") && (chain.step(), true)) left = make_expr(BinaryExpr{BinaryOp::logical_and, std::move(left), parse_not()}, line);
    return left;
  }

  ExprPtr parse_not() {
    DepthGuard guard(*this);
    const int line = current().line;
    if (accept_name("not")) return make_expr(UnaryExpr{UnaryOp::logical_not, parse_not()}, line);
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = current().line;
    ExprPtr first = parse_math1();
    CompareExpr compare;
    ChainGuard chain(*this);
    while (true) {
      chain.step();
      CompareOp op{};
      if (at_op("==")) op = CompareOp::eq;
      else if (at_op("!=")) op = CompareOp::ne;
      else if (at_op("<")) op = CompareOp::lt;
      else if (at_op("<=")) op = CompareOp::le;
      else if (at_op(">")) op = CompareOp::gt;
      else if (at_op(">=")) op = CompareOp::ge;
      else if (at_name("in")) op = CompareOp::in;
      else if (at_name("not") && peek().kind == TokenKind::name && peek().value == "in") {
        advance();
        op = CompareOp::not_in;
      } else {
        break;
      }
      advance();
      compare.rest.emplace_back(op, parse_math1());
    }
    if (compare.rest.empty()) return first;
    compare.first = std::move(first);
    return make_expr(std::move(compare), line);
  }

  ExprPtr parse_math1() {
    const int line = current().line;
    ExprPtr left = parse_concat();
    ChainGuard chain(*this);
    while (at_op("+") || at_op("-")) {
      chain.step();
      const BinaryOp op = advance().value == "+" ? BinaryOp::add : BinaryOp::subtract;
      left = make_expr(BinaryExpr{op, std::move(left), parse_concat()}, line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = current().line;
    ExprPtr left = parse_math2();
    ChainGuard chain(*this);
    while (accept_op("~") && (chain.step(), true)) left = make_expr(BinaryExpr{BinaryOp::concat, std::move(left), parse_math2()}, line);
    return left;
  }

  ExprPtr parse_math2() {
    const int line = current().line;
    ExprPtr left = parse_pow();
    ChainGuard chain(*this);
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      chain.step();
      const std::string op = advance().value;
      const BinaryOp kind = op == "*" ? BinaryOp::multiply : op == "/" ? BinaryOp::divide : op == "//" ? BinaryOp::floor_divide : BinaryOp::modulo;
      left = make_expr(BinaryExpr{kind, std::move(left), parse_pow()}, line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    const int line = current().line;
    ExprPtr left = parse_unary(true);
    ChainGuard chain(*this);
    while (accept_op("**") && (chain.step(), true)) left = make_expr(BinaryExpr{BinaryOp::power, std::move(left), parse_unary(true)}, line);
    return left;
  }

  ExprPtr parse_unary(bool with_filters) {
    DepthGuard guard(*this);
    const int line = current().line;
    ExprPtr node;
    if (accept_op("-")) {
      node = make_expr(UnaryExpr{UnaryOp::negate, parse_unary(false)}, line);
    } else if (accept_op("+")) {
      node = make_expr(UnaryExpr{UnaryOp::plus, parse_unary(false)}, line);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filters) node = parse_filters_and_tests(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    const Token& token = current();
    const int line = token.line;
    switch (token.kind) {
      case TokenKind::name: {
        const std::string name = advance().value;
        if (name == "true" || name == "True") return make_expr(LiteralExpr{Value(true)}, line);
        if (name == "false" || name == "False") return make_expr(LiteralExpr{Value(false)}, line);
        if (name == "none" || name == "None") return make_expr(LiteralExpr{Value(None{})}, line);
        return make_expr(NameExpr{name}, line);
      }
      case TokenKind::string: {
        std::string text = advance().value;
        while (current().kind == TokenKind::string) text += advance().value;  // 'a' 'b' concatenates
        return make_expr(LiteralExpr{Value(std::move(text))}, line);
      }
      case TokenKind::integer: return make_expr(LiteralExpr{parse_integer(advance())}, line);
      case TokenKind::floating: {
        const Token& number = advance();
        return make_expr(LiteralExpr{Value(std::strtod(number.value.c_str(), nullptr))}, line);
      }
      case TokenKind::op:
        if (token.value == "(") return parse_parenthesized();
        if (token.value == "[") return parse_list();
        if (token.value == "{") return parse_dict();
        break;
      default: break;
    }
    fail_expected("an expression");
  }

  static Value parse_integer(const Token& token) {
    const std::string& text = token.value;
    int base = 10;
    std::size_t skip = 0;
    if (text.size() > 2 && text[0] == '0' && std::isalpha(static_cast<unsigned char>(text[1])) != 0) {
      const char prefix = static_cast<char>(std::tolower(text[1]));
      base = prefix == 'x' ? 16 : prefix == 'o' ? 8 : 2;
      skip = 2;
    }
    std::int64_t value = 0;
    const auto result = std::from_chars(text.data() + skip, text.data() + text.size(), value, base);
    if (result.ec != std::errc() || result.ptr != text.data() + text.size()) {
      throw_syntax_error(token.line, token.column, "integer literal {} is not valid or does not fit in 64 bits", text);
    }
    return Value(value);
  }

  ExprPtr parse_parenthesized() {
    const int line = current().line;
    expect_op("(");
    if (accept_op(")")) return make_expr(ListExpr{{}, true}, line);  // ()
    ExprPtr first = parse_expression();
    if (accept_op(")")) return first;
    ListExpr tuple;
    tuple.tuple = true;
    tuple.items.push_back(std::move(first));
    while (accept_op(",")) {
      if (at_op(")")) break;
      tuple.items.push_back(parse_expression());
    }
    expect_op(")");
    return make_expr(std::move(tuple), line);
  }

  ExprPtr parse_list() {
    const int line = current().line;
    expect_op("[");
    ListExpr list;
    while (!at_op("]")) {
      if (!list.items.empty()) expect_op(",");
      if (at_op("]")) break;
      list.items.push_back(parse_expression());
    }
    expect_op("]");
    return make_expr(std::move(list), line);
  }

  ExprPtr parse_dict() {
    const int line = current().line;
    expect_op("{");
    DictExpr dict;
    while (!at_op("}")) {
      if (!dict.items.empty()) expect_op(",");
      if (at_op("}")) break;
      ExprPtr key = parse_expression();
      expect_op(":");
      dict.items.emplace_back(std::move(key), parse_expression());
    }
    expect_op("}");
    return make_expr(std::move(dict), line);
  }

  ExprPtr parse_postfix(ExprPtr node) {
    ChainGuard chain(*this);
    while (true) {
      chain.step();
      const int line = current().line;
      if (accept_op(".")) {
        if (current().kind == TokenKind::name) {
          node = make_expr(AttributeExpr{std::move(node), advance().value}, line);
        } else if (current().kind == TokenKind::integer) {  // items.0 is items[0]
          ExprPtr index = make_expr(LiteralExpr{parse_integer(advance())}, line);
          node = make_expr(ItemExpr{std::move(node), std::move(index)}, line);
        } else {
          fail_expected("an attribute name after '.'");
        }
      } else if (at_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_op("(")) {
        node = make_expr(CallExpr{std::move(node), parse_call_arguments()}, line);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    DepthGuard guard(*this);
    const int line = current().line;
    expect_op("[");
    ExprPtr start;
    if (!at_op(":")) {
      start = parse_expression();
      if (accept_op("]")) return make_expr(ItemExpr{std::move(object), std::move(start)}, line);
      if (at_op(",")) {
        throw_syntax_error(current().line, current().column, "tuple subscripts (a[x, y]) are not supported");
      }
    }
    expect_op(":");
    SliceExpr slice;
    slice.object = std::move(object);
    slice.start = std::move(start);
    if (!at_op("]") && !at_op(":")) slice.stop = parse_expression();
    if (accept_op(":") && !at_op("]")) slice.step = parse_expression();
    expect_op("]");
    return make_expr(std::move(slice), line);
  }

  Arguments parse_call_arguments() {
    DepthGuard guard(*this);
    expect_op("(");
    Arguments arguments;
    bool first = true;
    while (!at_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (at_op(")")) break;
      if (at_op("*") || at_op("**")) {
        throw_syntax_error(current().line, current().column, "*args / **kwargs in calls are not supported");
      }
      if (current().kind == TokenKind::name && peek().kind == TokenKind::op && peek().value == "=") {
        std::string name = advance().value;
        advance();  // =
        arguments.keyword.emplace_back(std::move(name), parse_expression());
      } else {
        if (!arguments.keyword.empty()) {
          throw_syntax_error(current().line, current().column, "positional argument follows keyword argument");
        }
        arguments.positional.push_back(parse_expression());
      }
    }
    expect_op(")");
    return arguments;
  }

  /// `| filter(...)`, `is [not] test ...` and calls on their results, left to right.
  ExprPtr parse_filters_and_tests(ExprPtr node) {
    ChainGuard chain(*this);
    while (true) {
      chain.step();
      const int line = current().line;
      if (accept_op("|")) {
        node = parse_filter(std::move(node));
      } else if (accept_name("is")) {
        node = parse_test(std::move(node));
      } else if (at_op("(")) {
        node = make_expr(CallExpr{std::move(node), parse_call_arguments()}, line);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter(ExprPtr operand) {
    const int line = current().line;
    const int column = current().column;
    std::string name = expect_name("a filter name after '|'");
    while (at_op(".") && peek().kind == TokenKind::name) {
      advance();
      name += "." + advance().value;
    }
    if (!is_known_filter(name)) throw_syntax_error(line, column, "unknown filter '{}'", name);
    Arguments arguments;
    if (at_op("(")) arguments = parse_call_arguments();
    return make_expr(FilterExpr{std::move(operand), std::move(name), std::move(arguments)}, line);
  }

  ExprPtr parse_test(ExprPtr operand) {
    const int line = current().line;
    const bool negated = accept_name("not");
    const int column = current().column;
    std::string name;
    if (current().kind == TokenKind::name) {
      name = advance().value;
    } else if (current().kind == TokenKind::op && (at_op("==") || at_op("!=") || at_op("<") || at_op("<=") ||
                                                   at_op(">") || at_op(">="))) {
      name = advance().value;
    } else {
      fail_expected("a test name after 'is'");
    }
    if (name == "none" || name == "None") name = "none";
    if (name == "true" || name == "True") name = "true";
    if (name == "false" || name == "False") name = "false";
    if (!is_known_test(name)) throw_syntax_error(line, column, "unknown test '{}'", name);
    Arguments arguments;
    if (at_op("(")) {
      arguments = parse_call_arguments();
    } else if (starts_test_argument()) {
      // `x is divisibleby 3`, `x is sameas false`: one argument without parentheses
      ExprPtr argument = parse_primary();
      arguments.positional.push_back(parse_postfix(std::move(argument)));
    }
    return make_expr(TestExpr{std::move(operand), std::move(name), std::move(arguments), negated}, line);
  }

  [[nodiscard]] bool starts_test_argument() const {
    const Token& token = current();
    switch (token.kind) {
      case TokenKind::string:
      case TokenKind::integer:
      case TokenKind::floating: return true;
      case TokenKind::name:
        return token.value != "else" && token.value != "or" && token.value != "and" && token.value != "if" &&
               token.value != "in" && token.value != "not" && token.value != "is";
      case TokenKind::op: return token.value == "[" || token.value == "{";
      default: return false;
    }
  }

  std::vector<Token> tokens_;
  std::size_t position_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> open_blocks_;
};

}  // namespace verl::tokenizer::jinja::detail
