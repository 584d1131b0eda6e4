// The Jinja lexer, configured as transformers configures jinja2 (trim_blocks, lstrip_blocks,
// keep_trailing_newline off): template text becomes data tokens and the tokens of {{ }} / {% %}
// tags, with the whitespace control of `-` / `+` markers applied exactly as jinja2 applies it.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/tokenizer/detail/unicode.hpp"

namespace verl::tokenizer::jinja {

/// A template that does not parse. The message names the line and column, what was expected and
/// what was found.
class SyntaxError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

namespace detail {

enum class TokenKind {
  data,            // template text
  variable_begin,  // {{
  variable_end,    // }}
  block_begin,     // {%
  block_end,       // %}
  name,
  string,   // value: the literal with its escapes resolved
  integer,  // value: the digits (underscores removed; may be 0x/0o/0b prefixed)
  floating,
  op,  // value: the operator text
  end_of_template,
};

struct Token {
  TokenKind kind;
  std::string value;
  int line = 1;
  int column = 1;
};

inline std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::data: return "template text";
    case TokenKind::variable_begin: return "'{{'";
    case TokenKind::variable_end: return "'}}'";
    case TokenKind::block_begin: return "'{%'";
    case TokenKind::block_end: return "'%}'";
    case TokenKind::name: return "'" + token.value + "'";
    case TokenKind::string: return "string literal";
    case TokenKind::integer:
    case TokenKind::floating: return "number " + token.value;
    case TokenKind::op: return "'" + token.value + "'";
    case TokenKind::end_of_template: return "end of template";
  }
  return "token";
}

template <class... Args>
[[noreturn]] inline void throw_syntax_error(int line, int column, fmt::format_string<Args...> format, Args&&... args) {
  throw SyntaxError(fmt::format("jinja template syntax error at line {}, column {}: {}", line, column,
                                fmt::format(format, std::forward<Args>(args)...)));
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : source_(normalize(source)) {}

  std::vector<Token> tokenize() {
    bool line_starting = true;  // jinja2: whether the previous match ended with a newline
    while (pos_ < source_.size()) {
      const std::size_t start = find_tag_start(pos_);
      if (start == std::string::npos) {
        push(TokenKind::data, source_.substr(pos_), pos_);
        pos_ = source_.size();
        break;
      }
      const char tag = source_[start + 1];  // '{', '%' or '#'
      const std::size_t after_tag = start + 2;
      const char sign = after_tag < source_.size() && (source_[after_tag] == '-' || source_[after_tag] == '+')
                            ? source_[after_tag]
                            : '\0';
      std::string text = source_.substr(pos_, start - pos_);
      apply_left_whitespace_control(text, sign, tag != '{', line_starting);
      if (!text.empty()) push(TokenKind::data, std::move(text), pos_);
      pos_ = after_tag + (sign != '\0' ? 1 : 0);
      if (tag == '#') {
        line_starting = skip_comment(start);
      } else if (tag == '%' && lex_raw(start, line_starting)) {
        // lex_raw consumed {% raw %}...{% endraw %} and updated line_starting
      } else {
        push(tag == '{' ? TokenKind::variable_begin : TokenKind::block_begin, "", start);
        line_starting = lex_tag(tag == '{');
      }
    }
    tokens_.push_back(Token{TokenKind::end_of_template, "", line_of(source_.size()), column_of(source_.size())});
    return std::move(tokens_);
  }

 private:
  /// jinja2 turns every \r\n and \r into \n and drops one trailing newline before lexing.
  static std::string normalize(std::string_view source) {
    std::string out;
    out.reserve(source.size());
    for (std::size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        out += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        out += source[i];
      }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  [[nodiscard]] std::size_t find_tag_start(std::size_t from) const {
    for (std::size_t at = source_.find('{', from); at != std::string::npos; at = source_.find('{', at + 1)) {
      if (at + 1 < source_.size() && (source_[at + 1] == '{' || source_[at + 1] == '%' || source_[at + 1] == '#')) {
        return at;
      }
    }
    return std::string::npos;
  }

  static bool is_space_at(std::string_view text, std::size_t pos, std::size_t& next) {
    const auto length = tokenizer::detail::utf8_sequence_at(text, pos);
    if (length <= 0) return false;
    std::size_t at = pos;
    const char32_t cp = tokenizer::detail::next_code_point(text, at);
    next = pos + static_cast<std::size_t>(length);
    return tokenizer::detail::is_python_space(cp);
  }

  /// Python's str.rstrip(): `{%-` removes all white space before the tag.
  static void rstrip(std::string& text) {
    std::size_t end = text.size();
    while (end > 0) {
      std::size_t start = end - 1;
      while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      std::size_t next = 0;
      if (!is_space_at(text, start, next) || next != end) break;
      end = start;
    }
    text.resize(end);
  }

  /// Python's \s* after `-%}` / `-}}` / `-#}`.
  [[nodiscard]] std::size_t skip_spaces(std::size_t pos) const {
    std::size_t next = 0;
    while (pos < source_.size() && is_space_at(source_, pos, next)) pos = next;
    return pos;
  }

  /// `{%-` strips all white space before the tag; otherwise lstrip_blocks strips the spaces and
  /// tabs between the line start and a block or comment tag when nothing else precedes it there.
  static void apply_left_whitespace_control(std::string& text, char sign, bool is_block_or_comment,
                                            bool line_starting) {
    if (sign == '-') {
      rstrip(text);
      return;
    }
    if (sign == '+' || !is_block_or_comment) return;
    const std::size_t newline = text.rfind('\n');
    const std::size_t line_start = newline == std::string::npos ? 0 : newline + 1;
    if (line_start == 0 && !line_starting) return;
    if (text.find_first_not_of(" \t", line_start) == std::string::npos) text.resize(line_start);
  }

  /// Skips a comment; returns whether its end consumed a newline (for lstrip_blocks).
  bool skip_comment(std::size_t start) {
    for (std::size_t at = pos_; at < source_.size(); ++at) {
      if ((source_[at] == '-' || source_[at] == '+') && source_.compare(at + 1, 2, "#}") == 0) {
        pos_ = source_[at] == '-' ? skip_spaces(at + 3) : at + 3;
        return pos_ > 0 && source_[pos_ - 1] == '\n';
      }
      if (source_.compare(at, 2, "#}") == 0) {
        pos_ = at + 2;
        if (pos_ < source_.size() && source_[pos_] == '\n') ++pos_;  // trim_blocks
        return source_[pos_ - 1] == '\n';
      }
    }
    throw_syntax_error(line_of(start), column_of(start), "missing end of comment tag '#}}'");
  }

  /// {% raw %}...{% endraw %}: the text between is data. Returns false when the tag is not raw.
  bool lex_raw(std::size_t start, bool& line_starting) {
    std::size_t at = skip_spaces(pos_);
    if (source_.compare(at, 3, "raw") != 0) return false;
    at = skip_spaces(at + 3);
    if (source_.compare(at, 3, "-%}") == 0) {
      at = skip_spaces(at + 3);
    } else if (source_.compare(at, 2, "%}") == 0) {
      at += 2;  // jinja2 applies no trim_blocks to the raw opening tag
    } else {
      return false;
    }
    for (std::size_t end = source_.find("{%", at); end != std::string::npos; end = source_.find("{%", end + 1)) {
      std::size_t cursor = end + 2;
      const char sign = cursor < source_.size() && (source_[cursor] == '-' || source_[cursor] == '+') ? source_[cursor] : '\0';
      if (sign != '\0') ++cursor;
      cursor = skip_spaces(cursor);
      if (source_.compare(cursor, 6, "endraw") != 0) continue;
      cursor = skip_spaces(cursor + 6);
      std::size_t after = 0;
      if (source_.compare(cursor, 3, "+%}") == 0) {
        after = cursor + 3;
      } else if (source_.compare(cursor, 3, "-%}") == 0) {
        after = skip_spaces(cursor + 3);
      } else if (source_.compare(cursor, 2, "%}") == 0) {
        after = cursor + 2;
        if (after < source_.size() && source_[after] == '\n') ++after;
      } else {
        continue;
      }
      std::string text = source_.substr(at, end - at);
      apply_left_whitespace_control(text, sign, true, source_[at - 1] == '\n');
      if (!text.empty()) push(TokenKind::data, std::move(text), at);
      pos_ = after;
      line_starting = source_[pos_ - 1] == '\n';
      return true;
    }
    throw_syntax_error(line_of(start), column_of(start), "missing '{{% endraw %}}' for this '{{% raw %}}'");
  }

  /// Lexes the inside of {{ }} or {% %} up to and including its end; returns whether the end
  /// consumed a newline.
  bool lex_tag(bool is_variable) {
    std::vector<char> brackets;
    while (true) {
      if (pos_ >= source_.size()) {
        throw_syntax_error(line_of(source_.size()), column_of(source_.size()),
                           "unexpected end of template, expected '{}'", is_variable ? "}}" : "%}");
      }
      if (brackets.empty()) {  // an end marker inside brackets is part of a dict literal
        if (const auto end = match_tag_end(is_variable)) {
          push(is_variable ? TokenKind::variable_end : TokenKind::block_end, "", pos_);
          pos_ = *end;
          return source_[pos_ - 1] == '\n';
        }
      }
      std::size_t next = 0;
      if (is_space_at(source_, pos_, next)) {
        pos_ = next;
        continue;
      }
      const char c = source_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c)) != 0) {
        lex_number();
      } else if (std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_') {
        std::size_t end = pos_;
        while (end < source_.size() && (std::isalnum(static_cast<unsigned char>(source_[end])) != 0 || source_[end] == '_')) ++end;
        push(TokenKind::name, source_.substr(pos_, end - pos_), pos_);
        pos_ = end;
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        lex_operator(brackets);
      }
    }
  }

  [[nodiscard]] std::optional<std::size_t> match_tag_end(bool is_variable) const {
    const std::string_view end = is_variable ? "}}" : "%}";
    if (source_.compare(pos_, 2, end) == 0) {
      std::size_t after = pos_ + 2;
      if (!is_variable && after < source_.size() && source_[after] == '\n') ++after;  // trim_blocks
      return after;
    }
    if (source_[pos_] == '-' && source_.compare(pos_ + 1, 2, end) == 0) return skip_spaces(pos_ + 3);
    if (!is_variable && source_[pos_] == '+' && source_.compare(pos_ + 1, 2, end) == 0) return pos_ + 3;
    return std::nullopt;
  }

  void lex_number() {
    const std::size_t start = pos_;
    const auto digits = [&](std::size_t at) {  // (\d+_)*\d+
      std::size_t end = at;
      while (end < source_.size() && (std::isdigit(static_cast<unsigned char>(source_[end])) != 0 ||
                                      (source_[end] == '_' && end + 1 < source_.size() &&
                                       std::isdigit(static_cast<unsigned char>(source_[end + 1])) != 0 && end > at))) {
        ++end;
      }
      return end;
    };
    const bool after_dot = start > 0 && source_[start - 1] == '.';  // `items.0.1` is two integers
    if (source_[start] == '0' && start + 1 < source_.size() &&
        std::string_view("xXoObB").find(source_[start + 1]) != std::string_view::npos) {
      std::size_t end = start + 2;
      while (end < source_.size() && (std::isxdigit(static_cast<unsigned char>(source_[end])) != 0 || source_[end] == '_')) ++end;
      push(TokenKind::integer, strip_underscores(source_.substr(start, end - start)), start);
      pos_ = end;
      return;
    }
    std::size_t end = digits(start);
    bool is_float = false;
    if (!after_dot && end + 1 < source_.size() && source_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(source_[end + 1])) != 0) {
      end = digits(end + 1);
      is_float = true;
    }
    if (!after_dot && end < source_.size() && (source_[end] == 'e' || source_[end] == 'E')) {
      std::size_t exponent = end + 1;
      if (exponent < source_.size() && (source_[exponent] == '+' || source_[exponent] == '-')) ++exponent;
      if (exponent < source_.size() && std::isdigit(static_cast<unsigned char>(source_[exponent])) != 0) {
        end = digits(exponent);
        is_float = true;
      }
    }
    push(is_float ? TokenKind::floating : TokenKind::integer, strip_underscores(source_.substr(start, end - start)), start);
    pos_ = end;
  }

  static std::string strip_underscores(std::string text) {
    std::erase(text, '_');
    return text;
  }

  /// A string literal with Python's unicode-escape rules (what jinja2 applies to literals).
  void lex_string() {
    const std::size_t start = pos_;
    const char quote = source_[pos_++];
    std::string value;
    while (true) {
      if (pos_ >= source_.size()) {
        throw_syntax_error(line_of(start), column_of(start), "unterminated string literal");
      }
      const char c = source_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c != '\\') {
        value += c;
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= source_.size()) throw_syntax_error(line_of(start), column_of(start), "unterminated string literal");
      const char e = source_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\n': break;  // a backslash-newline continues the line
        case 'x': value_append_hex(value, 2, start); break;
        case 'u': value_append_hex(value, 4, start); break;
        case 'U': value_append_hex(value, 8, start); break;
        case 'N': throw_syntax_error(line_of(start), column_of(start), "\\N{{...}} escapes in string literals are not supported");
        default:
          if (e >= '0' && e <= '7') {
            unsigned code = static_cast<unsigned>(e - '0');
            for (int k = 0; k < 2 && pos_ < source_.size() && source_[pos_] >= '0' && source_[pos_] <= '7'; ++k) {
              code = code * 8 + static_cast<unsigned>(source_[pos_++] - '0');
            }
            tokenizer::detail::append_utf8(value, static_cast<char32_t>(code));
          } else {
            value += '\\';  // Python keeps unknown escapes as written
            value += e;
          }
      }
    }
    push(TokenKind::string, std::move(value), start);
  }

  void value_append_hex(std::string& value, int digits, std::size_t start) {
    if (pos_ + static_cast<std::size_t>(digits) > source_.size()) {
      throw_syntax_error(line_of(start), column_of(start), "truncated \\x/\\u/\\U escape in string literal");
    }
    unsigned long code = 0;
    for (int k = 0; k < digits; ++k) {
      const char h = source_[pos_ + static_cast<std::size_t>(k)];
      if (std::isxdigit(static_cast<unsigned char>(h)) == 0) {
        throw_syntax_error(line_of(start), column_of(start), "truncated \\x/\\u/\\U escape in string literal");
      }
      code = code * 16 + static_cast<unsigned long>(std::isdigit(static_cast<unsigned char>(h)) != 0 ? h - '0' : (std::tolower(h) - 'a' + 10));
    }
    if (code > 0x10FFFF) throw_syntax_error(line_of(start), column_of(start), "escape past U+10FFFF in string literal");
    pos_ += static_cast<std::size_t>(digits);
    tokenizer::detail::append_utf8(value, static_cast<char32_t>(code));
  }

  void lex_operator(std::vector<char>& brackets) {
    static constexpr std::string_view two_char[] = {"**", "//", "==", "!=", ">=", "<="};
    for (const auto op : two_char) {
      if (source_.compare(pos_, 2, op) == 0) {
        push(TokenKind::op, std::string(op), pos_);
        pos_ += 2;
        return;
      }
    }
    const char c = source_[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      throw_syntax_error(line_of(pos_), column_of(pos_), "unexpected character '{}'", c);
    }
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c);
    if (c == ')' || c == ']' || c == '}') {
      const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets.empty() || brackets.back() != open) {
        throw_syntax_error(line_of(pos_), column_of(pos_), "unexpected '{}'", c);
      }
      brackets.pop_back();
    }
    push(TokenKind::op, std::string(1, c), pos_);
    ++pos_;
  }

  void push(TokenKind kind, std::string value, std::size_t at) {
    tokens_.push_back(Token{kind, std::move(value), line_of(at), column_of(at)});
  }

  [[nodiscard]] int line_of(std::size_t at) {
    // Positions only grow, so count newlines incrementally.
    if (at < line_cursor_) {
      line_cursor_ = 0;
      line_ = 1;
      line_start_ = 0;
    }
    for (; line_cursor_ < at && line_cursor_ < source_.size(); ++line_cursor_) {
      if (source_[line_cursor_] == '\n') {
        ++line_;
        line_start_ = line_cursor_ + 1;
      }
    }
    return line_;
  }
  [[nodiscard]] int column_of(std::size_t at) {
    (void)line_of(at);
    return static_cast<int>(code_point_span(line_start_, at)) + 1;
  }
  [[nodiscard]] std::size_t code_point_span(std::size_t from, std::size_t to) const {
    std::size_t count = 0;
    for (std::size_t i = from; i < to && i < source_.size(); ++i) count += (static_cast<unsigned char>(source_[i]) & 0xC0) != 0x80 ? 1U : 0U;
    return count;
  }

  std::string source_;
  std::size_t pos_ = 0;
  std::vector<Token> tokens_;
  std::size_t line_cursor_ = 0;
  int line_ = 1;
  std::size_t line_start_ = 0;
};

}  // namespace detail
}  // namespace verl::tokenizer::jinja
