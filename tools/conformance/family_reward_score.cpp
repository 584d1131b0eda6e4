// Conformance handlers for reward_score.json: verl's rule-based scorers (gsm8k, math_reward,
// math_dapo), keyed "module.function".
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "handlers.hpp"
#include "verl/reward/reward_score.hpp"

namespace verl::conformance {
namespace {

namespace gsm8k = verl::reward::gsm8k;
namespace math_reward = verl::reward::math_reward;
namespace math_dapo = verl::reward::math_dapo;

std::string text_input(const GoldenCase& c, const char* key) { return c.inputs().at(key).get<std::string>(); }

/// A string input that may be null (Python None).
std::optional<std::string> optional_text_input(const GoldenCase& c, const char* key) {
  if (!c.has_input(key)) return std::nullopt;
  return c.inputs().at(key).get<std::string>();
}

json to_json(const std::optional<std::string>& value) { return value ? json(*value) : json(nullptr); }

/// A function of one string input returning a string (or None) under the output key "result".
template <class Fn>
Handler string_function(const char* input_key, Fn fn) {
  return [input_key, fn](const GoldenCase& c, CaseCheck& check) {
    check.exact("result", to_json(fn(text_input(c, input_key))));
  };
}

void register_reward_score(HandlerTable& table) {
  // ---- gsm8k -----------------------------------------------------------------------------
  table["gsm8k.extract_solution"] = [](const GoldenCase& c, CaseCheck& check) {
    const auto method = gsm8k::parse_extract_method(c.args().value("method", std::string("strict")));
    check.exact("result", to_json(gsm8k::extract_solution(text_input(c, "solution_str"), method)));
  };
  table["gsm8k.compute_score"] = [](const GoldenCase& c, CaseCheck& check) {
    const auto method = gsm8k::parse_extract_method(c.args().value("method", std::string("strict")));
    const auto details =
        gsm8k::score_details(text_input(c, "solution_str"), text_input(c, "ground_truth"), method,
                             c.args().value("format_score", 0.0), c.args().value("score", 1.0));
    check.scalar("score", details.score, c.tolerance());
    check.exact("score_is_int", details.verl_returns_int());
  };

  // ---- math_reward -----------------------------------------------------------------------
  table["math_reward.compute_score"] = [](const GoldenCase& c, CaseCheck& check) {
    check.scalar("score", math_reward::compute_score(text_input(c, "solution_str"), text_input(c, "ground_truth")),
                 c.tolerance());
  };
  table["math_reward.last_boxed_only_string"] =
      string_function("string", [](const std::string& s) { return math_reward::last_boxed_only_string(s); });
  table["math_reward.remove_boxed"] =
      string_function("s", [](const std::string& s) { return std::optional(math_reward::remove_boxed(s)); });
  table["math_reward.strip_string"] =
      string_function("string", [](const std::string& s) { return std::optional(math_reward::strip_string(s)); });
  table["math_reward.fix_fracs"] =
      string_function("string", [](const std::string& s) { return std::optional(math_reward::fix_fracs(s)); });
  table["math_reward.fix_a_slash_b"] =
      string_function("string", [](const std::string& s) { return std::optional(math_reward::fix_a_slash_b(s)); });
  table["math_reward.fix_sqrt"] =
      string_function("string", [](const std::string& s) { return std::optional(math_reward::fix_sqrt(s)); });
  table["math_reward.remove_right_units"] = string_function(
      "string", [](const std::string& s) { return std::optional(math_reward::remove_right_units(s)); });
  table["math_reward.is_equiv"] = [](const GoldenCase& c, CaseCheck& check) {
    const auto str1 = optional_text_input(c, "str1");
    const auto str2 = optional_text_input(c, "str2");
    check.exact("result", math_reward::is_equiv(str1, str2));
  };

  // ---- math_dapo -------------------------------------------------------------------------
  table["math_dapo.compute_score"] = [](const GoldenCase& c, CaseCheck& check) {
    std::optional<std::vector<std::int64_t>> pause_tokens_index;
    if (c.has_arg("pause_tokens_index")) pause_tokens_index = c.args().at("pause_tokens_index").get<std::vector<std::int64_t>>();
    const auto result = math_dapo::compute_score(
        text_input(c, "solution_str"), text_input(c, "ground_truth"), c.args().value("strict_box_verify", false),
        pause_tokens_index ? std::optional<std::span<const std::int64_t>>(*pause_tokens_index) : std::nullopt);
    check.scalar("score", result.score, c.tolerance());
    check.exact("acc", result.acc);
    check.exact("pred", to_json(result.pred));
  };
  table["math_dapo.normalize_final_answer"] = string_function(
      "final_answer", [](const std::string& s) { return std::optional(math_dapo::normalize_final_answer(s)); });
  table["math_dapo.last_boxed_only_string"] =
      string_function("string", [](const std::string& s) { return math_dapo::last_boxed_only_string(s); });
  table["math_dapo.remove_boxed"] =
      string_function("s", [](const std::string& s) { return std::optional(math_dapo::remove_boxed(s)); });
  table["math_dapo.is_correct_minerva"] = [](const GoldenCase& c, CaseCheck& check) {
    const auto result = math_dapo::is_correct_minerva(text_input(c, "solution_str"), text_input(c, "gt"),
                                                      c.args().value("gt_need_extract", false));
    check.exact("correct", result.correct);
    check.exact("pred", result.pred);
  };
}

const Registrar registrar{register_reward_score};

}  // namespace
}  // namespace verl::conformance
