// MATH (Hendrycks) rule-based reward (verl/utils/reward_score/math_reward.py, after
// lm-evaluation-harness): take the last \boxed{...} of a response, normalise it and the ground
// truth with strip_string's fixed rewrite rules, and compare the strings.
//
// Where verl raises (its asserts, IndexError on a trailing "\sqrt" or "\frac") the public
// functions throw verl::InvalidArgument. Internally those outcomes are values, so is_equiv and
// compute_score, which swallow verl's exceptions, never pay for a throw.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "verl/core/error.hpp"
#include "verl/reward/detail/pystr.hpp"
#include "verl/reward/scorer.hpp"

namespace verl::reward::math_reward {

namespace detail {

using reward::detail::excerpt;
namespace utf8 = reward::detail::utf8;

/// Where verl's normalisation raises.
enum class Failure {
  none,
  several_text_units,     ///< remove_right_units: `"\text{ "` occurs more than once (AssertionError)
  sqrt_without_argument,  ///< fix_sqrt: "\sqrt" at the end or twice in a row (IndexError)
  frac_without_argument,  ///< fix_fracs: "\frac" at the end or twice in a row (IndexError)
};

[[noreturn]] inline void throw_failure(Failure failure, std::string_view function, std::string_view string) {
  switch (failure) {
    case Failure::several_text_units:
      ::verl::detail::throw_invalid_argument(
          "string: {} expects \"\\text{{ \" at most once (verl asserts), got it more than once in '{}'",
          function, excerpt(string));
    case Failure::sqrt_without_argument:
      ::verl::detail::throw_invalid_argument(
          "string: {} expects a character after every \"\\sqrt\" (verl raises IndexError), got '{}'", function,
          excerpt(string));
    case Failure::frac_without_argument:
      ::verl::detail::throw_invalid_argument(
          "string: {} expects a character after every \"\\frac\" (verl raises IndexError), got '{}'", function,
          excerpt(string));
    case Failure::none: break;
  }
  ::verl::detail::throw_invalid_argument("string: {} failed on '{}'", function, excerpt(string));
}

/// remove_boxed without its asserts: the content, or nullopt where verl asserts.
constexpr std::optional<std::string_view> unbox(std::string_view s) {
  constexpr std::string_view boxed_space = "\\boxed ";
  if (s.find(boxed_space) != std::string_view::npos) {
    if (!s.starts_with(boxed_space)) return std::nullopt;
    return s.substr(boxed_space.size());
  }
  constexpr std::string_view boxed_brace = "\\boxed{";
  if (!s.starts_with(boxed_brace) || !s.ends_with('}')) return std::nullopt;
  return s.substr(boxed_brace.size(), s.size() - boxed_brace.size() - 1);
}

/// remove_right_units in place: cuts `s` at its single `"\text{ "`.
inline Failure remove_right_units(std::string& s) {
  constexpr std::string_view unit_marker = "\\text{ ";
  const std::size_t hit = s.find(unit_marker);
  if (hit == std::string::npos) return Failure::none;
  if (s.find(unit_marker, hit + unit_marker.size()) != std::string::npos) return Failure::several_text_units;
  s.resize(hit);
  return Failure::none;
}

/// fix_sqrt: "\sqrt3" -> "\sqrt{3}" (one code point) for every "\sqrt" not followed by '{'.
inline Failure fix_sqrt(std::string_view s, std::string& out) {
  constexpr std::string_view sqrt = "\\sqrt";
  std::size_t hit = s.find(sqrt);
  out.assign(s.substr(0, hit));
  if (hit == std::string_view::npos) return Failure::none;
  while (hit != std::string_view::npos) {
    const std::size_t begin = hit + sqrt.size();
    hit = s.find(sqrt, begin);
    const std::string_view piece = s.substr(begin, hit == std::string_view::npos ? std::string_view::npos : hit - begin);
    if (piece.empty()) return Failure::sqrt_without_argument;
    out += sqrt;
    if (piece.front() == '{') {
      out += piece;
    } else {
      const std::size_t first = utf8::length_at(piece, 0);
      out += '{';
      out += piece.substr(0, first);
      out += '}';
      out += piece.substr(first);
    }
  }
  return Failure::none;
}

/// fix_fracs: "\frac12" -> "\frac{1}{2}", "\frac1{72}" -> "\frac{1}{72}" (arguments are single
/// code points). A "\frac" followed by a single code point leaves the whole string unchanged.
inline Failure fix_fracs(std::string_view s, std::string& out) {
  constexpr std::string_view frac = "\\frac";
  std::size_t hit = s.find(frac);
  out.assign(s.substr(0, hit));
  while (hit != std::string_view::npos) {
    const std::size_t begin = hit + frac.size();
    hit = s.find(frac, begin);
    const std::string_view piece = s.substr(begin, hit == std::string_view::npos ? std::string_view::npos : hit - begin);
    out += frac;
    if (piece.empty()) return Failure::frac_without_argument;
    if (piece.front() == '{') {
      out += piece;
      continue;
    }
    const std::size_t a_len = utf8::length_at(piece, 0);
    if (a_len == piece.size()) {  // fewer than two code points: verl gives up on the string
      out.assign(s);
      return Failure::none;
    }
    const std::string_view a = piece.substr(0, a_len);
    const std::string_view b = reward::detail::code_point_at(piece, a_len);
    const std::string_view rest = piece.substr(a_len + b.size());
    out += '{';
    out += a;
    out += '}';
    if (b != "{") {
      out += '{';
      out += b;
      out += '}';
    } else {
      out += b;
    }
    out += rest;
  }
  return Failure::none;
}

/// fix_a_slash_b: "3/4" -> "\frac{3}{4}" when both sides are integers exactly as Python prints them.
inline std::string fix_a_slash_b(std::string_view s) {
  const std::size_t slash = s.find('/');
  if (slash == std::string_view::npos || s.find('/', slash + 1) != std::string_view::npos) return std::string(s);
  const std::string_view a = s.substr(0, slash);
  const std::string_view b = s.substr(slash + 1);
  if (!reward::detail::is_python_int_repr(a) || !reward::detail::is_python_int_repr(b)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 9);
  out.append("\\frac{").append(a).append("}{").append(b).append("}");
  return out;
}

/// strip_string into `out`; on failure `out` is unspecified.
inline Failure strip_string(std::string_view input, std::string& out) {
  using reward::detail::replace_all;
  std::string s(input);
  replace_all(s, "\n", "");          // line breaks
  replace_all(s, "\\!", "");         // inverse spaces
  replace_all(s, "\\\\", "\\");      // "\\" -> "\"
  replace_all(s, "tfrac", "frac");
  replace_all(s, "dfrac", "frac");
  replace_all(s, "\\left", "");
  replace_all(s, "\\right", "");
  replace_all(s, "^{\\circ}", "");   // degrees
  replace_all(s, "^\\circ", "");
  replace_all(s, "\\$", "");         // dollar signs
  if (const Failure failure = remove_right_units(s); failure != Failure::none) return failure;
  replace_all(s, "\\\\%", "");       // percentages
  replace_all(s, "\\%", "");
  replace_all(s, " .", " 0.");       // " .5" and "{.5" mean 0.5
  replace_all(s, "{.", "{0.");
  if (s.empty()) {
    out = std::move(s);
    return Failure::none;
  }
  if (s.front() == '.') s.insert(0, 1, '0');
  // "k = 5" -> " 5": a single '=' after at most two characters introduces the value.
  if (const std::size_t eq = s.find('=');
      eq != std::string::npos && s.find('=', eq + 1) == std::string::npos &&
      utf8::length_at_most(std::string_view(s).substr(0, eq), 2)) {
    s.erase(0, eq + 1);
  }
  if (const Failure failure = fix_sqrt(s, out); failure != Failure::none) return failure;
  replace_all(out, " ", "");
  if (const Failure failure = fix_fracs(out, s); failure != Failure::none) return failure;
  if (s == "0.5") s = "\\frac{1}{2}";
  out = fix_a_slash_b(s);
  return Failure::none;
}

}  // namespace detail

/// verl's last_boxed_only_string: the last "\boxed{...}" (braces balanced) of `string`, or the
/// last "\fbox{...}" when there is no "\boxed". If "\boxed " (with a space) occurs anywhere, the
/// text after its last occurrence up to the next '$' is returned as "\boxed <text>" instead.
/// nullopt (verl's None) when nothing is found or the braces never close.
inline std::optional<std::string> last_boxed_only_string(std::string_view string) {
  constexpr std::string_view boxed_space = "\\boxed ";
  if (const std::size_t hit = reward::detail::find_last(string, boxed_space); hit != std::string_view::npos) {
    const std::string_view after = string.substr(hit + boxed_space.size());
    std::string out(boxed_space);
    out += after.substr(0, after.find('$'));
    return out;
  }
  std::size_t start = reward::detail::find_last(string, "\\boxed");
  if (start == std::string_view::npos) start = reward::detail::find_last(string, "\\fbox");
  if (start == std::string_view::npos) return std::nullopt;
  return reward::detail::through_closing_brace(string, start);
}

/// verl's remove_boxed: "\boxed{x}" -> "x" and "\boxed x" -> "x". Throws InvalidArgument for
/// anything else (verl asserts), "\fbox{x}" included.
inline std::string remove_boxed(std::string_view s) {
  const auto content = detail::unbox(s);
  VERL_CHECK_ARG(content.has_value(),
                 "s: expected \"\\boxed{{...}}\" or a string starting with \"\\boxed \" (verl asserts), got '{}'",
                 detail::excerpt(s));
  return std::string(*content);
}

/// verl's remove_right_units: the text before `"\text{ "`; throws if it occurs more than once.
inline std::string remove_right_units(std::string_view string) {
  std::string s(string);
  if (const auto failure = detail::remove_right_units(s); failure != detail::Failure::none)
    detail::throw_failure(failure, "remove_right_units", string);
  return s;
}

/// verl's fix_sqrt; throws where a "\sqrt" is followed by nothing (verl's IndexError).
inline std::string fix_sqrt(std::string_view string) {
  std::string out;
  if (const auto failure = detail::fix_sqrt(string, out); failure != detail::Failure::none)
    detail::throw_failure(failure, "fix_sqrt", string);
  return out;
}

/// verl's fix_fracs; throws where a "\frac" is followed by nothing (verl's IndexError).
inline std::string fix_fracs(std::string_view string) {
  std::string out;
  if (const auto failure = detail::fix_fracs(string, out); failure != detail::Failure::none)
    detail::throw_failure(failure, "fix_fracs", string);
  return out;
}

/// verl's fix_a_slash_b (never raises: verl catches its own parse errors).
inline std::string fix_a_slash_b(std::string_view string) { return detail::fix_a_slash_b(string); }

/// verl's strip_string: the normalised answer; throws where verl raises (see Failure).
inline std::string strip_string(std::string_view string) {
  std::string out;
  if (const auto failure = detail::strip_string(string, out); failure != detail::Failure::none)
    detail::throw_failure(failure, "strip_string", string);
  return out;
}

/// verl's is_equiv: the normalised strings are equal; if normalising either raises, the raw
/// strings are compared. Both None is true, one None is false.
inline bool is_equiv(std::optional<std::string_view> str1, std::optional<std::string_view> str2) {
  if (!str1 || !str2) return !str1 && !str2;
  std::string stripped1, stripped2;
  if (detail::strip_string(*str1, stripped1) != detail::Failure::none ||
      detail::strip_string(*str2, stripped2) != detail::Failure::none)
    return *str1 == *str2;
  return stripped1 == stripped2;
}

/// verl's compute_score: 1.0 when the last boxed answer is equivalent to `ground_truth`, else
/// 0.0 (also where verl catches an exception, e.g. an "\fbox{...}" answer).
inline double compute_score(std::string_view solution_str, std::string_view ground_truth) {
  const auto boxed = last_boxed_only_string(solution_str);
  if (!boxed) return 0.0;
  const auto answer = detail::unbox(*boxed);
  if (!answer) return 0.0;
  return is_equiv(*answer, ground_truth) ? 1.0 : 0.0;
}

}  // namespace verl::reward::math_reward

namespace verl::reward {

/// Scoring policy for verl's math_reward module (data sources "lighteval/MATH",
/// "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500").
struct MathRewardScorer {
  static constexpr std::string_view name = "math_reward";

  RewardOutput operator()(std::string_view solution_str, std::string_view ground_truth) const {
    return {math_reward::compute_score(solution_str, ground_truth), {}, {}};
  }
};

}  // namespace verl::reward
