// DAPO math reward (verl/utils/reward_score/math_dapo.py): the answer after the last
// "Answer:" (Minerva-style), normalised and compared with the normalised ground truth; or, in
// strict mode, the last \boxed{...} of the final 100 characters compared exactly (also, as in
// verl 0.9.1, when no "Answer:" line is found and a box is). Scores are +1.0 / -1.0 with `acc`
// and the prediction, as verl's dict.
//
// verl's regular expressions are fixed patterns; each has a hand-written scanner below that
// reproduces Python `re` on code points (`\s` is Unicode whitespace, `(?i)` folds 's' with
// U+017F, `.` stops at '\n', lazy and greedy groups, re.sub/findall resuming after a match).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "verl/core/error.hpp"
#include "verl/reward/detail/pystr.hpp"
#include "verl/reward/scorer.hpp"

namespace verl::reward::math_dapo {

/// compute_score looks only at the last 300 characters (code points) of a response.
inline constexpr std::size_t solution_clip_chars = 300;
/// Strict mode looks for the boxed answer in the last 100 characters (or the 100 before the last
/// pause token).
inline constexpr std::size_t strict_box_window_chars = 100;
/// The prediction normalised when no "Answer:" line is found.
inline constexpr std::string_view invalid_answer = "[INVALID]";

namespace detail {

namespace utf8 = reward::detail::utf8;
using reward::detail::excerpt;
using reward::detail::replace_all;

/// verl's SUBSTITUTIONS, applied in order.
inline constexpr std::array<std::pair<std::string_view, std::string_view>, 10> substitutions{{
    {"an ", ""},
    {"a ", ""},
    {".$", "$"},
    {"\\$", ""},
    {"\\ ", ""},
    {" ", ""},
    {"mbox", "text"},
    {",\\text{and}", ","},
    {"\\text{and}", ","},
    {"\\text{m}", "\\text{}"},
}};

/// verl's REMOVED_EXPRESSIONS (units, filler words, TeX spacing), removed in order.
inline constexpr std::array<std::string_view, 41> removed_expressions{
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots",
    "sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds",
    "meters", "meals", "edges", "students", "childrentickets", "multiples",
    "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}",
    "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", "\"", "\\dots",
};

// An entry left out of a fixed-size list would be an empty needle.
constexpr bool no_empty_needles() {
  for (const auto& [before, after] : substitutions)
    if (before.empty()) return false;
  for (const auto expression : removed_expressions)
    if (expression.empty()) return false;
  return true;
}
static_assert(no_empty_needles());

constexpr std::size_t npos = std::string_view::npos;

/// End of a case-insensitive "answer" at `pos` (Python's (?i) also folds U+017F LATIN SMALL
/// LETTER LONG S to 's'), or npos.
constexpr std::size_t match_answer_word(std::string_view s, std::size_t pos) {
  constexpr std::string_view word = "answer";
  constexpr std::string_view long_s = "\u017F";
  for (const char letter : word) {
    if (pos >= s.size()) return npos;
    if (letter == 's' && s.substr(pos, long_s.size()) == long_s) {
      pos += long_s.size();
      continue;
    }
    if ((static_cast<unsigned char>(s[pos]) | 0x20) != static_cast<unsigned char>(letter)) return npos;
    ++pos;
  }
  return pos;
}

/// The last capture of re.findall(r"(?i)Answer\s*:\s*([^\n]+)", s), or nullopt.
///
/// After the colon, `\s*` first takes the whole whitespace run (which may span lines) and the
/// capture is the rest of that line. If the run reaches the end of the string, `\s*` backs off
/// to the last code point in it that is not '\n', and that single code point is the capture.
constexpr std::optional<std::string_view> last_answer(std::string_view s) {
  using reward::detail::skip_python_space;
  std::optional<std::string_view> last;
  std::size_t from = 0;
  while (from < s.size()) {
    const std::size_t hit = from;
    from = hit + 1;  // where to look next if no match starts here
    if ((static_cast<unsigned char>(s[hit]) | 0x20) != 'a') continue;
    const std::size_t word_end = match_answer_word(s, hit);
    if (word_end == npos) continue;
    const std::size_t colon = skip_python_space(s, word_end);
    if (colon >= s.size() || s[colon] != ':') continue;
    const std::size_t value = skip_python_space(s, colon + 1);
    if (value < s.size()) {
      const std::size_t line_end = std::min(s.find('\n', value), s.size());
      last = s.substr(value, line_end - value);
      from = line_end;
      continue;
    }
    std::optional<std::string_view> last_non_newline;
    for (std::size_t pos = colon + 1; pos < s.size(); pos += utf8::length_at(s, pos))
      if (s[pos] != '\n') last_non_newline = reward::detail::code_point_at(s, pos);
    if (!last_non_newline) continue;
    last = last_non_newline;
    from = static_cast<std::size_t>(last_non_newline->data() + last_non_newline->size() - s.data());
  }
  return last;
}

/// re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\3$", s): every line with two or more '$' becomes "$"
/// + the text between its first two '$' + "$" (`.` never crosses a newline).
inline std::string keep_first_dollar_pair_per_line(std::string_view s) {
  if (s.find('$') == npos) return std::string(s);
  std::string out;
  out.reserve(s.size());
  for (std::size_t line_begin = 0;;) {
    const std::size_t line_end = s.find('\n', line_begin);
    const std::string_view line = s.substr(line_begin, line_end == npos ? npos : line_end - line_begin);
    const std::size_t first = line.find('$');
    const std::size_t second = first == npos ? npos : line.find('$', first + 1);
    if (second != npos) {
      out += '$';
      out += line.substr(first + 1, second - first - 1);
      out += '$';
    } else {
      out += line;
    }
    if (line_end == npos) break;
    out += '\n';
    line_begin = line_end + 1;
  }
  return out;
}

/// re.sub(open + r"(.*?)(\})", r"\2", s) (lazy) or re.sub(open + r"(.*)(\})", r"\2", s)
/// (greedy): "\cmd{x}" -> "x" where the closing '}' is on the same line.
inline std::string unwrap_command(std::string_view s, std::string_view open, bool greedy) {
  if (s.find(open) == npos) return std::string(s);
  std::string out;
  out.reserve(s.size());
  std::size_t copied = 0, search = 0;
  for (std::size_t hit; (hit = s.find(open, search)) != npos;) {
    search = hit + 1;  // where re.sub looks next when no match starts here
    const std::size_t content = hit + open.size();
    const std::size_t line_end = std::min(s.find('\n', content), s.size());
    const std::string_view rest_of_line = s.substr(content, line_end - content);
    const std::size_t close = greedy ? rest_of_line.rfind('}') : rest_of_line.find('}');
    if (close == npos) continue;
    out.append(s, copied, hit - copied);
    out.append(rest_of_line.substr(0, close));
    copied = search = content + close + 1;
  }
  out.append(s, copied);
  return out;
}

/// re.sub(r"(frac)([^{])(.)", r"frac{\2}{\3}", s): "\fracab" -> "\frac{a}{b}" (code points; the
/// first argument may be a newline, the second may not).
inline std::string brace_frac_arguments(std::string_view s) {
  constexpr std::string_view frac = "frac";
  if (s.find(frac) == npos) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  std::size_t copied = 0, search = 0;
  for (std::size_t hit; (hit = s.find(frac, search)) != npos;) {
    search = hit + 1;  // where re.sub looks next when no match starts here
    const std::size_t first = hit + frac.size();
    if (first >= s.size() || s[first] == '{') continue;
    const std::size_t second = first + utf8::length_at(s, first);
    if (second >= s.size() || s[second] == '\n') continue;
    const std::size_t end = second + utf8::length_at(s, second);
    out.append(s, copied, hit - copied);
    out.append("frac{").append(s.substr(first, second - first)).append("}{");
    out.append(s.substr(second, end - second)).append("}");
    copied = search = end;
  }
  out.append(s, copied);
  return out;
}

/// re.sub(r"(sqrt)([^{])", r"sqrt{\2}", s): "\sqrta" -> "\sqrt{a}" (one code point).
inline std::string brace_sqrt_argument(std::string_view s) {
  constexpr std::string_view sqrt = "sqrt";
  if (s.find(sqrt) == npos) return std::string(s);
  std::string out;
  out.reserve(s.size() + 4);
  std::size_t copied = 0, search = 0;
  for (std::size_t hit; (hit = s.find(sqrt, search)) != npos;) {
    search = hit + 1;  // where re.sub looks next when no match starts here
    const std::size_t argument = hit + sqrt.size();
    if (argument >= s.size() || s[argument] == '{') continue;
    const std::size_t end = argument + utf8::length_at(s, argument);
    out.append(s, copied, hit - copied);
    out.append("sqrt{").append(s.substr(argument, end - argument)).append("}");
    copied = search = end;
  }
  out.append(s, copied);
  return out;
}

/// Python's s.replace(",", "").isdigit().
constexpr bool is_digits_ignoring_commas(std::string_view s) {
  bool any_digit = false;
  for (std::size_t pos = 0; pos < s.size();) {
    const auto [cp, len] = utf8::decode(s, pos);
    pos += len;
    if (cp == ',') continue;
    if (!reward::detail::is_python_digit(cp)) return false;
    any_digit = true;
  }
  return any_digit;
}

/// remove_boxed without its asserts.
constexpr std::optional<std::string_view> unbox(std::string_view s) {
  constexpr std::string_view left = "\\boxed{";
  if (!s.starts_with(left) || !s.ends_with('}')) return std::nullopt;
  return s.substr(left.size(), s.size() - left.size() - 1);
}

}  // namespace detail

/// verl's last_boxed_only_string: the last "\boxed{...}" with balanced braces, or nullopt (None)
/// when there is none or its braces never close.
inline std::optional<std::string> last_boxed_only_string(std::string_view string) {
  const std::size_t start = reward::detail::find_last(string, "\\boxed{");
  if (start == std::string_view::npos) return std::nullopt;
  return reward::detail::through_closing_brace(string, start);
}

/// verl's remove_boxed: "\boxed{x}" -> "x"; anything else throws InvalidArgument (verl asserts).
inline std::string remove_boxed(std::string_view s) {
  const auto content = detail::unbox(s);
  VERL_CHECK_ARG(content.has_value(), "s: expected \"\\boxed{{...}}\" (verl asserts \"box error\"), got '{}'",
                 detail::excerpt(s));
  return std::string(*content);
}

/// verl's normalize_final_answer: keeps the text after the last '=', applies verl's
/// substitutions and removals, unwraps $...$, \text{}, \textbf{}, \overline{} and \boxed{},
/// braces "\fracab" and "\sqrta", drops '$', removes thousands separators from a number, and
/// strips surrounding whitespace.
inline std::string normalize_final_answer(std::string_view final_answer) {
  const std::size_t last_eq = final_answer.rfind('=');
  std::string s(last_eq == std::string_view::npos ? final_answer : final_answer.substr(last_eq + 1));
  for (const auto& [before, after] : detail::substitutions) detail::replace_all(s, before, after);
  for (const auto expression : detail::removed_expressions) detail::replace_all(s, expression, "");
  s = detail::keep_first_dollar_pair_per_line(s);
  s = detail::unwrap_command(s, "\\text{", /*greedy=*/false);
  s = detail::unwrap_command(s, "\\textbf{", /*greedy=*/false);
  s = detail::unwrap_command(s, "\\overline{", /*greedy=*/false);
  s = detail::unwrap_command(s, "\\boxed{", /*greedy=*/true);
  s = detail::brace_frac_arguments(s);
  s = detail::brace_sqrt_argument(s);
  detail::replace_all(s, "$", "");
  if (detail::is_digits_ignoring_commas(s)) detail::replace_all(s, ",", "");
  return std::string(reward::detail::strip(s));
}

/// Result of is_correct_minerva: whether the normalised prediction equals the normalised
/// ground truth, and the normalised prediction.
struct MinervaResult {
  bool correct = false;
  std::string pred;
};

/// verl's is_correct_minerva with its default answer pattern `(?i)Answer\s*:\s*([^\n]+)`.
/// With `gt_need_extract`, the ground truth is the content of its last \boxed{...}; a ground
/// truth without one throws InvalidArgument (verl raises TypeError).
inline MinervaResult is_correct_minerva(std::string_view solution_str, std::string_view gt,
                                        bool gt_need_extract = false) {
  const auto extracted = detail::last_answer(solution_str);
  MinervaResult result;
  result.pred = normalize_final_answer(extracted ? *extracted : invalid_answer);
  std::string normalized_gt;
  if (gt_need_extract) {
    const auto boxed = last_boxed_only_string(gt);
    VERL_CHECK_ARG(boxed.has_value(),
                   "gt: expected a \"\\boxed{{...}}\" answer when gt_need_extract is set (verl raises "
                   "TypeError), got '{}'",
                   detail::excerpt(gt));
    normalized_gt = normalize_final_answer(remove_boxed(*boxed));
  } else {
    normalized_gt = normalize_final_answer(gt);
  }
  result.correct = result.pred == normalized_gt;
  return result;
}

/// Result of is_correct_strict_box: +1 or -1, and the boxed prediction (nullopt when none).
struct StrictBoxResult {
  int score = -1;
  std::optional<std::string> pred;
};

/// verl's is_correct_strict_box: the last \boxed{...} among the last 100 characters of `pred`
/// (or, given the 4 pause-token indices, from character `pause_tokens_index[3] - 100` on, with
/// Python's slice rules) must equal `gt` exactly.
inline StrictBoxResult is_correct_strict_box(std::string_view pred, std::string_view gt,
                                             std::optional<std::span<const std::int64_t>> pause_tokens_index = {}) {
  std::string_view window;
  if (pause_tokens_index) {
    VERL_CHECK_ARG(pause_tokens_index->size() == 4, "pause_tokens_index: expected 4 indices (verl asserts), got {}",
                   pause_tokens_index->size());
    constexpr auto window_chars = static_cast<std::int64_t>(strict_box_window_chars);
    const std::int64_t last_pause = (*pause_tokens_index)[3];
    const std::int64_t start = last_pause < std::numeric_limits<std::int64_t>::min() + window_chars
                                   ? std::numeric_limits<std::int64_t>::min()
                                   : last_pause - window_chars;
    window = reward::detail::slice_from(pred, start);
  } else {
    window = reward::detail::last_code_points(pred, strict_box_window_chars);
  }
  StrictBoxResult result;
  if (const auto boxed = last_boxed_only_string(window)) result.pred = remove_boxed(*boxed);
  result.score = result.pred && *result.pred == gt ? 1 : -1;
  return result;
}

/// Result of verify: correctness and the prediction (nullopt only in strict mode).
struct VerifyResult {
  bool correct = false;
  std::optional<std::string> pred;
};

/// verl 0.9.1's verify: the strict boxed comparison, or the Minerva check; when the Minerva check
/// finds no answer (its prediction normalises to "[INVALID]"), the strict check decides if the
/// solution has a \boxed{...} in its window (pred is then the box's raw content, compared with
/// the ground truth as is), else the Minerva result stands.
inline VerifyResult verify(std::string_view solution_str, std::string_view answer, bool strict_box_verify = false,
                           std::optional<std::span<const std::int64_t>> pause_tokens_index = {}) {
  if (strict_box_verify) {
    auto strict = is_correct_strict_box(solution_str, answer, pause_tokens_index);
    return {strict.score == 1, std::move(strict.pred)};
  }
  auto minerva = is_correct_minerva(solution_str, answer);
  if (minerva.pred == invalid_answer) {
    auto strict = is_correct_strict_box(solution_str, answer, pause_tokens_index);
    if (strict.pred) return {strict.score == 1, std::move(strict.pred)};
  }
  return {minerva.correct, std::move(minerva.pred)};
}

/// verl's compute_score dict: score +1.0 / -1.0, acc, pred (None -> nullopt).
struct ScoreResult {
  double score = -1.0;
  bool acc = false;
  std::optional<std::string> pred;
};

/// verl's compute_score: verifies the last 300 characters of the response.
inline ScoreResult compute_score(std::string_view solution_str, std::string_view ground_truth,
                                 bool strict_box_verify = false,
                                 std::optional<std::span<const std::int64_t>> pause_tokens_index = {}) {
  const std::string_view tail = reward::detail::last_code_points(solution_str, solution_clip_chars);
  auto verified = verify(tail, ground_truth, strict_box_verify, pause_tokens_index);
  return {verified.correct ? 1.0 : -1.0, verified.correct, std::move(verified.pred)};
}

}  // namespace verl::reward::math_dapo

namespace verl::reward {

/// Scoring policy for verl's math_dapo module (data sources "math_dapo", "math",
/// "math_dapo_reasoning", "aime*"). Pause-token indices are per response, so they are an
/// argument of math_dapo::compute_score rather than a knob here.
struct MathDapoScorer {
  static constexpr std::string_view name = "math_dapo";

  bool strict_box_verify = false;

  RewardOutput operator()(std::string_view solution_str, std::string_view ground_truth) const {
    auto result = math_dapo::compute_score(solution_str, ground_truth, strict_box_verify);
    return {result.score, result.acc, std::move(result.pred)};
  }
};

}  // namespace verl::reward
