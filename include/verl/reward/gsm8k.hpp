// GSM8K rule-based reward (verl/utils/reward_score/gsm8k.py): extract the final number from a
// response ("#### 72" in strict mode, the last number in flexible mode) and compare it with the
// ground truth as a string.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "verl/core/error.hpp"
#include "verl/reward/detail/pystr.hpp"
#include "verl/reward/scorer.hpp"
#include "verl/core/enum_names.hpp"

namespace verl::reward::gsm8k {

/// verl matches only the last 300 characters (code points) of a response.
inline constexpr std::size_t solution_clip_chars = 300;

enum class ExtractMethod { strict, flexible };

inline constexpr EnumNames extract_method_names{std::pair{ExtractMethod::strict, std::string_view("strict")},
                                               std::pair{ExtractMethod::flexible, std::string_view("flexible")}};

constexpr std::string_view to_string(ExtractMethod method) { return extract_method_names.name(method); }

/// Parses verl's `method` argument ("strict" or "flexible"); verl asserts on anything else.
inline ExtractMethod parse_extract_method(std::string_view method) {
  return extract_method_names.parse(method, "method");
}

namespace detail {

constexpr bool is_number_char(char c) { return (c >= '0' && c <= '9') || c == '.' || c == ','; }

/// End of the match of `\-?[0-9\.\,]+` at `pos`, or `pos` when it does not match there. The
/// optional '-' only belongs to a match when a number character follows it.
constexpr std::size_t match_signed_number(std::string_view s, std::size_t pos) {
  std::size_t digits = pos;
  if (digits < s.size() && s[digits] == '-') ++digits;
  std::size_t end = digits;
  while (end < s.size() && is_number_char(s[end])) ++end;
  return end > digits ? end : pos;
}

/// Last capture of re.findall("#### (\-?[0-9\.\,]+)", s).
constexpr std::optional<std::string_view> last_strict_answer(std::string_view s) {
  constexpr std::string_view marker = "#### ";
  std::optional<std::string_view> last;
  std::size_t from = 0;
  for (std::size_t hit = s.find(marker, from); hit != std::string_view::npos; hit = s.find(marker, from)) {
    const std::size_t begin = hit + marker.size();
    const std::size_t end = match_signed_number(s, begin);
    if (end > begin) {
      last = s.substr(begin, end - begin);
      from = end;  // findall resumes after a match
    } else {
      from = hit + 1;
    }
  }
  return last;
}

/// verl's flexible choice among re.findall("(\-?[0-9\.\,]+)", s): the last match that is not
/// "." (matches are never empty); if every match is ".", its loop ends on the first one.
constexpr std::optional<std::string_view> flexible_answer(std::string_view s) {
  std::optional<std::string_view> first, last_valid;
  for (std::size_t pos = 0; pos < s.size();) {
    const std::size_t end = match_signed_number(s, pos);
    if (end == pos) {
      ++pos;
      continue;
    }
    const std::string_view match = s.substr(pos, end - pos);
    if (!first) first = match;
    if (match != ".") last_valid = match;
    pos = end;
  }
  return last_valid ? last_valid : first;
}

}  // namespace detail

/// verl's extract_solution: the answer found in the last 300 characters, or nullopt (None).
/// Strict mode removes thousands separators; flexible mode returns the match as written.
inline std::optional<std::string> extract_solution(std::string_view solution_str,
                                                   ExtractMethod method = ExtractMethod::strict) {
  const std::string_view tail = reward::detail::last_code_points(solution_str, solution_clip_chars);
  if (method == ExtractMethod::flexible) {
    const auto answer = detail::flexible_answer(tail);
    return answer ? std::optional<std::string>(*answer) : std::nullopt;
  }
  const auto answer = detail::last_strict_answer(tail);
  if (!answer) return std::nullopt;
  std::string cleaned;
  cleaned.reserve(answer->size());
  for (char c : *answer)
    if (c != ',') cleaned.push_back(c);  // verl also drops '$', which the pattern cannot match
  return cleaned;
}

/// The score together with the extracted answer. verl returns the int 0 when no answer is found
/// (`answer` empty) and a float (`score` or `format_score`) otherwise.
struct ScoreDetails {
  double score = 0.0;
  std::optional<std::string> answer;

  bool verl_returns_int() const { return !answer.has_value(); }
};

/// verl's compute_score, also returning the extracted answer.
inline ScoreDetails score_details(std::string_view solution_str, std::string_view ground_truth,
                                  ExtractMethod method = ExtractMethod::strict, double format_score = 0.0,
                                  double score = 1.0) {
  ScoreDetails details;
  details.answer = extract_solution(solution_str, method);
  if (details.answer) details.score = *details.answer == ground_truth ? score : format_score;
  return details;
}

/// verl's compute_score: `score` for a correct answer, `format_score` for a wrong one, 0 when
/// no answer is found.
inline double compute_score(std::string_view solution_str, std::string_view ground_truth,
                            ExtractMethod method = ExtractMethod::strict, double format_score = 0.0,
                            double score = 1.0) {
  return score_details(solution_str, ground_truth, method, format_score, score).score;
}

}  // namespace verl::reward::gsm8k

namespace verl::reward {

/// Scoring policy for verl's gsm8k module (data source "openai/gsm8k").
struct Gsm8kScorer {
  static constexpr std::string_view name = "gsm8k";

  gsm8k::ExtractMethod method = gsm8k::ExtractMethod::strict;
  double format_score = 0.0;  ///< for an answer that is found but wrong
  double score = 1.0;         ///< for a correct answer

  RewardOutput operator()(std::string_view solution_str, std::string_view ground_truth) const {
    return {gsm8k::compute_score(solution_str, ground_truth, method, format_score, score), {}, {}};
  }
};

}  // namespace verl::reward
