// Rule-based scorers (gsm8k, math_reward, math_dapo), default_compute_score dispatch, the scorer
// registry and the Scorer / RewardFunction concepts.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "verl/reward/reward_score.hpp"

using namespace verl;
using namespace verl::reward;

namespace {

/// Runs `fn`, expecting InvalidArgument whose message contains every one of `fragments`.
template <class Fn>
void expect_invalid_argument(Fn fn, std::initializer_list<std::string_view> fragments) {
  try {
    fn();
    FAIL() << "expected verl::InvalidArgument";
  } catch (const InvalidArgument& e) {
    for (const auto fragment : fragments)
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what() << " lacks " << fragment;
  }
}

std::string repeat(std::string_view piece, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += piece;
  return out;
}

}  // namespace

// ---- gsm8k ---------------------------------------------------------------------------------

TEST(RewardGsm8k, StrictTakesTheLastMarkedAnswerWithoutCommas) {
  EXPECT_EQ(gsm8k::extract_solution("#### 1\n#### -1,234.5"), "-1234.5");
  EXPECT_EQ(gsm8k::extract_solution("##### 5"), "5");
  EXPECT_EQ(gsm8k::extract_solution("####  5"), std::nullopt);   // exactly one space
  EXPECT_EQ(gsm8k::extract_solution("#### -x"), std::nullopt);
  EXPECT_EQ(gsm8k::extract_solution("#### \u0661\u0662"), std::nullopt);  // [0-9] is ASCII
}

TEST(RewardGsm8k, FlexibleKeepsCommasAndFallsBackToTheFirstDot) {
  using enum gsm8k::ExtractMethod;
  EXPECT_EQ(gsm8k::extract_solution("1,000 then 5,", flexible), "5,");
  EXPECT_EQ(gsm8k::extract_solution("it is 3. Done.", flexible), "3.");
  EXPECT_EQ(gsm8k::extract_solution("a . b .", flexible), ".");  // every match is "."
  EXPECT_EQ(gsm8k::extract_solution("x-.y", flexible), "-.");
  EXPECT_EQ(gsm8k::extract_solution("no numbers", flexible), std::nullopt);
}

TEST(RewardGsm8k, ClipsToTheLast300CodePointsNotBytes) {
  // 298 two-byte characters after the answer: still inside the last 300 code points.
  EXPECT_EQ(gsm8k::extract_solution("#### 5" + repeat("\u00e9", 294)), "5");
  EXPECT_EQ(gsm8k::extract_solution("#### 5" + repeat("\u00e9", 295)), std::nullopt);  // '#' clipped off
  // 301 code points: the leading '1' is clipped off.
  EXPECT_EQ(gsm8k::extract_solution("12" + repeat("\u00e9", 299), gsm8k::ExtractMethod::flexible), "2");
}

TEST(RewardGsm8k, ScoresAndTheIntZeroCase) {
  EXPECT_EQ(gsm8k::compute_score("#### 72", "72"), 1.0);
  EXPECT_EQ(gsm8k::compute_score("#### 71", "72", gsm8k::ExtractMethod::strict, 0.1), 0.1);
  const auto none = gsm8k::score_details("no answer", "72", gsm8k::ExtractMethod::strict, 0.1);
  EXPECT_EQ(none.score, 0.0);
  EXPECT_TRUE(none.verl_returns_int());
  EXPECT_FALSE(gsm8k::score_details("#### 71", "72").verl_returns_int());
}

TEST(RewardGsm8k, UnknownMethodListsTheValidOnes) {
  expect_invalid_argument([] { (void)gsm8k::parse_extract_method("loose"); }, {"method", "strict", "flexible", "loose"});
  EXPECT_EQ(gsm8k::parse_extract_method("flexible"), gsm8k::ExtractMethod::flexible);
}

// ---- math_reward ---------------------------------------------------------------------------

TEST(RewardMath, LastBoxedOnlyString) {
  EXPECT_EQ(math_reward::last_boxed_only_string("a \\boxed{1} b \\boxed{\\frac{1}{2}} c"), "\\boxed{\\frac{1}{2}}");
  EXPECT_EQ(math_reward::last_boxed_only_string("\\boxed{1} and \\boxed 5$ x"), "\\boxed 5");  // the space form wins
  EXPECT_EQ(math_reward::last_boxed_only_string("\\fbox{3}"), "\\fbox{3}");
  EXPECT_EQ(math_reward::last_boxed_only_string("\\boxed{1"), std::nullopt);
  EXPECT_EQ(math_reward::last_boxed_only_string("\\boxed}{}"), std::nullopt);  // the counter goes negative first
  EXPECT_EQ(math_reward::last_boxed_only_string("nothing"), std::nullopt);
}

TEST(RewardMath, RemoveBoxedAssertsLikeVerl) {
  EXPECT_EQ(math_reward::remove_boxed("\\boxed{42}"), "42");
  EXPECT_EQ(math_reward::remove_boxed("\\boxed 42"), "42");
  EXPECT_EQ(math_reward::remove_boxed("\\boxed{}"), "");
  for (const char* bad : {"\\fbox{9}", "\\boxed{5", "boxed{5}", "", "x\\boxed 5"})
    expect_invalid_argument([&] { (void)math_reward::remove_boxed(bad); }, {"s:", "\\boxed"});
}

TEST(RewardMath, StripStringNormalises) {
  EXPECT_EQ(math_reward::strip_string("\\left( 1, 2 \\right)"), "(1,2)");
  EXPECT_EQ(math_reward::strip_string("\\dfrac12"), "\\frac{1}{2}");
  EXPECT_EQ(math_reward::strip_string("0.5"), "\\frac{1}{2}");
  EXPECT_EQ(math_reward::strip_string(".5"), "\\frac{1}{2}");
  EXPECT_EQ(math_reward::strip_string("k = 3/4"), "\\frac{3}{4}");
  EXPECT_EQ(math_reward::strip_string("abc = 3"), "abc=3");   // more than two characters before '='
  EXPECT_EQ(math_reward::strip_string("\u00e9\u00e9=3"), "3");  // two code points, four bytes
  EXPECT_EQ(math_reward::strip_string("10\\text{ cm}"), "10");
  EXPECT_EQ(math_reward::strip_string("90^\\circ"), "90");
  EXPECT_EQ(math_reward::strip_string("\\sqrt3"), "\\sqrt{3}");
  EXPECT_EQ(math_reward::strip_string("50\\%"), "50");
}

TEST(RewardMath, HelpersRaiseWhereVerlRaises) {
  expect_invalid_argument([] { (void)math_reward::remove_right_units("\\text{ a } \\text{ b }"); },
                          {"string", "remove_right_units", "\\text{ "});
  expect_invalid_argument([] { (void)math_reward::fix_sqrt("2\\sqrt"); }, {"string", "fix_sqrt", "\\sqrt"});
  expect_invalid_argument([] { (void)math_reward::fix_fracs("\\frac\\frac12"); }, {"string", "fix_fracs"});
  expect_invalid_argument([] { (void)math_reward::strip_string("1\\frac"); }, {"string", "strip_string"});
  EXPECT_EQ(math_reward::fix_fracs("\\frac1\\frac"), "\\frac1\\frac");  // a one-character argument gives up first
  EXPECT_EQ(math_reward::fix_fracs("\\frac1{72}"), "\\frac{1}{72}");
  EXPECT_EQ(math_reward::fix_fracs("\\frac{7}2"), "\\frac{7}2");
  EXPECT_EQ(math_reward::fix_fracs("\\frac\u00e9\u00e8x"), "\\frac{\u00e9}{\u00e8}x");
}

TEST(RewardMath, FixASlashBOnlyForCanonicalIntegers) {
  EXPECT_EQ(math_reward::fix_a_slash_b("3/4"), "\\frac{3}{4}");
  EXPECT_EQ(math_reward::fix_a_slash_b("-3/4"), "\\frac{-3}{4}");
  for (const char* kept : {"03/4", "3/4/5", "-0/1", "+3/4", "3 /4", "a/b", "3/", "\u0663/4", "1_0/2"})
    EXPECT_EQ(math_reward::fix_a_slash_b(kept), kept);
}

TEST(RewardMath, IsEquivHandlesNoneAndFallsBackToRawComparison) {
  EXPECT_TRUE(math_reward::is_equiv(std::nullopt, std::nullopt));
  EXPECT_FALSE(math_reward::is_equiv("1", std::nullopt));
  EXPECT_TRUE(math_reward::is_equiv("\\frac12", "0.5"));
  // Normalising raises for both, so the raw strings are compared.
  EXPECT_TRUE(math_reward::is_equiv("\\sqrt", "\\sqrt"));
  EXPECT_FALSE(math_reward::is_equiv("\\sqrt", "\\sqrt "));
}

TEST(RewardMath, ComputeScoreSwallowsVerlsExceptions) {
  EXPECT_EQ(math_reward::compute_score("so $x = \\boxed{\\frac{1}{2}}$", "0.5"), 1.0);
  EXPECT_EQ(math_reward::compute_score("\\fbox{3}", "3"), 0.0);  // remove_boxed asserts inside
  EXPECT_EQ(math_reward::compute_score("no box", "3"), 0.0);
  EXPECT_EQ(math_reward::compute_score("\\boxed{2\\sqrt}", "2\\sqrt"), 1.0);  // raw comparison
}

// ---- math_dapo -----------------------------------------------------------------------------

TEST(RewardDapo, AnswerPatternFollowsPythonRe) {
  const auto pred = [](std::string_view s) { return math_dapo::is_correct_minerva(s, "").pred; };
  EXPECT_EQ(pred("Answer: 1\nanswer : 2"), "2");
  EXPECT_EQ(pred("ANSWER:\n\n 7 apples"), "7apples");        // \s* crosses lines
  EXPECT_EQ(pred("An\u017Fwer: 9"), "9");                     // (?i) folds long s
  EXPECT_EQ(pred("\uff21nswer: 9"), "[INVALID]");             // fullwidth A does not fold
  EXPECT_EQ(pred("Answer\u2028:\u30005"), "5");               // Unicode whitespace
  EXPECT_EQ(pred("Answer:\n"), "[INVALID]");                  // needs one non-newline character
  EXPECT_EQ(pred("Answer: \t\n\n"), "");                       // backtracks to the tab, then strip()
  EXPECT_EQ(pred("AnswerAnswer: 3"), "3");
}

TEST(RewardDapo, NormalizeFinalAnswer) {
  using math_dapo::normalize_final_answer;
  EXPECT_EQ(normalize_final_answer("x = \\boxed{\\frac{1}{2}}"), "\\frac{1}{2}");
  EXPECT_EQ(normalize_final_answer("\\fracab"), "\\frac{a}{b}");
  EXPECT_EQ(normalize_final_answer("\\sqrt2"), "\\sqrt{2}");
  EXPECT_EQ(normalize_final_answer("1,000,000"), "1000000");
  EXPECT_EQ(normalize_final_answer("\u0663,\u00b2"), "\u0663\u00b2");  // isdigit is Unicode-aware
  EXPECT_EQ(normalize_final_answer("$5$ and $6$"), "5");
  EXPECT_EQ(normalize_final_answer("\\text{ab}\\text{c\nd}"), "ab\\text{c\nd}");  // `.` stops at '\n'
  EXPECT_EQ(normalize_final_answer("10 inches"), "10");
  EXPECT_EQ(normalize_final_answer("an apple"), "apple");
  EXPECT_EQ(normalize_final_answer("\u00a0 7 \u3000"), "7");
}

TEST(RewardDapo, RemoveBoxedAndLastBoxed) {
  EXPECT_EQ(math_dapo::last_boxed_only_string("\\boxed 5 \\boxed{6}"), "\\boxed{6}");
  EXPECT_EQ(math_dapo::last_boxed_only_string("\\fbox{6}"), std::nullopt);
  EXPECT_EQ(math_dapo::remove_boxed("\\boxed{6}"), "6");
  expect_invalid_argument([] { (void)math_dapo::remove_boxed("\\boxed 5"); }, {"s:", "box error"});
}

TEST(RewardDapo, WithoutAnAnswerLineTheBoxedAnswerDecides) {
  // verl 0.9.1: no "Answer:" line (the prediction normalises to "[INVALID]") falls back to the
  // strict check, whose prediction is the box's raw content, compared as is.
  const auto boxed = math_dapo::compute_score("so \\boxed{4}", "4");
  EXPECT_TRUE(boxed.acc);
  EXPECT_EQ(boxed.score, 1.0);
  EXPECT_EQ(boxed.pred, "4");
  const auto raw = math_dapo::compute_score("So $x = \\boxed{\\frac12}$", "\\frac{1}{2}");
  EXPECT_FALSE(raw.acc);  // no normalisation in the strict check
  EXPECT_EQ(raw.pred, "\\frac12");
  const auto nothing = math_dapo::compute_score("no answer here", "4");
  EXPECT_FALSE(nothing.acc);
  EXPECT_EQ(nothing.pred, "[INVALID]");
  // A literal "Answer: [INVALID]" normalises the same way: the box decides.
  EXPECT_TRUE(math_dapo::compute_score("\\boxed{4}\nAnswer: [INVALID]", "4").acc);
  // An Answer line, even a wrong one, is never overridden by a box.
  const auto line = math_dapo::compute_score("\\boxed{4}\nAnswer: 5", "4");
  EXPECT_FALSE(line.acc);
  EXPECT_EQ(line.pred, "5");
  // The box must be within the last 100 characters, as in strict mode.
  EXPECT_FALSE(math_dapo::compute_score("\\boxed{4}" + repeat("\u00e9", 92), "4").acc);
  EXPECT_TRUE(math_dapo::compute_score("\\boxed{4}" + repeat("\u00e9", 91), "4").acc);
}

TEST(RewardDapo, ComputeScoreMinervaAndStrict) {
  const auto ok = math_dapo::compute_score("Thus.\nAnswer: $\\frac12$", "\\frac{1}{2}");
  EXPECT_EQ(ok.score, 1.0);
  EXPECT_TRUE(ok.acc);
  EXPECT_EQ(ok.pred, "\\frac{1}{2}");
  const auto wrong = math_dapo::compute_score("Answer: 3", "4");
  EXPECT_EQ(wrong.score, -1.0);
  EXPECT_FALSE(wrong.acc);
  EXPECT_EQ(wrong.pred, "3");
  const auto strict = math_dapo::compute_score("so \\boxed{4}", "4", true);
  EXPECT_TRUE(strict.acc);
  EXPECT_EQ(strict.pred, "4");
  const auto no_box = math_dapo::compute_score("Answer: 4", "4", true);
  EXPECT_FALSE(no_box.acc);
  EXPECT_EQ(no_box.pred, std::nullopt);
  // The boxed answer must be within the last 100 characters.
  EXPECT_FALSE(math_dapo::compute_score("\\boxed{4}" + repeat("\u00e9", 92), "4", true).acc);
  EXPECT_TRUE(math_dapo::compute_score("\\boxed{4}" + repeat("\u00e9", 91), "4", true).acc);
}

TEST(RewardDapo, PauseTokensIndexSlicesLikePython) {
  const std::string text = "\\boxed{1}" + repeat("x", 200) + "\\boxed{2}";  // 218 characters
  const std::array<std::int64_t, 4> early{0, 0, 0, 105};   // window starts at character 5: the last box is "2"
  EXPECT_EQ(math_dapo::is_correct_strict_box(text, "2", early).pred, "2");
  const std::array<std::int64_t, 4> negative{0, 0, 0, 90};  // start -10: the last 10 characters
  EXPECT_EQ(math_dapo::is_correct_strict_box(text, "2", negative).pred, "2");
  const std::array<std::int64_t, 4> cut{0, 0, 0, 310};      // start 210: "{2}" only, no box
  EXPECT_EQ(math_dapo::is_correct_strict_box(text, "2", cut).pred, std::nullopt);
  const std::vector<std::int64_t> three{1, 2, 3};
  expect_invalid_argument([&] { (void)math_dapo::is_correct_strict_box(text, "2", three); },
                          {"pause_tokens_index", "4", "3"});
}

TEST(RewardDapo, GroundTruthExtraction) {
  EXPECT_TRUE(math_dapo::is_correct_minerva("Answer: 5", "so \\boxed{5}", true).correct);
  expect_invalid_argument([] { (void)math_dapo::is_correct_minerva("Answer: 5", "5", true); },
                          {"gt", "gt_need_extract"});
}

// ---- dispatch, registry, concepts ------------------------------------------------------------

TEST(RewardDispatch, DataSourcesPickVerlsScorer) {
  EXPECT_EQ(default_compute_score("openai/gsm8k", "#### 3", "3").score, 1.0);
  EXPECT_FALSE(default_compute_score("openai/gsm8k", "#### 3", "3").has_extra_info());
  EXPECT_EQ(default_compute_score("lighteval/MATH", "\\boxed{3}", "3").score, 1.0);
  EXPECT_EQ(default_compute_score("DigitalLearningGmbH/MATH-lighteval", "\\boxed{3}", "4").score, 0.0);
  EXPECT_EQ(default_compute_score("HuggingFaceH4/MATH-500", "\\boxed{3}", "3").score, 1.0);
  for (const char* dapo : {"math_dapo", "math", "math_dapo_reasoning", "aime2024", "aime"}) {
    const auto out = default_compute_score(dapo, "Answer: 3", "3");
    EXPECT_EQ(out.score, 1.0) << dapo;
    EXPECT_EQ(out.acc, true) << dapo;
    EXPECT_EQ(out.pred, "3") << dapo;
  }
  EXPECT_TRUE(std::holds_alternative<Gsm8kScorer>(scorer_for_data_source("openai/gsm8k")));
}

TEST(RewardDispatch, UnknownAndUnportedDataSources) {
  expect_invalid_argument([] { (void)default_compute_score("my/dataset", "", ""); },
                          {"data_source", "my/dataset", "openai/gsm8k", "lighteval/MATH", "aime"});
  EXPECT_THROW((void)default_compute_score("codecontests", "", ""), NotImplemented);
  EXPECT_THROW((void)default_compute_score("numina_olympiads", "", ""), NotImplemented);
}

TEST(RewardDispatch, RegistryByModuleName) {
  for (const auto name : scorer_names)
    EXPECT_EQ(std::visit([](const auto& s) { return std::string_view(s.name); }, make_scorer(name)), name);
  expect_invalid_argument([] { (void)make_scorer("prime_math"); },
                          {"scorer name", "gsm8k", "math_reward", "math_dapo", "prime_math"});
}

TEST(RewardDispatch, ScorerKnobs) {
  const Gsm8kScorer flexible{gsm8k::ExtractMethod::flexible, 0.25, 2.0};
  EXPECT_EQ(flexible("the result is 8", "8").score, 2.0);
  EXPECT_EQ(flexible("the result is 9", "8").score, 0.25);
  const MathDapoScorer strict{true};
  EXPECT_EQ(strict("Answer: 3", "3").score, -1.0);
  EXPECT_EQ(score(AnyScorer{strict}, "\\boxed{3}", "3").score, 1.0);
}

namespace {
struct NotAScorer {
  static constexpr std::string_view name = "x";
  double operator()(std::string_view, std::string_view) const { return 0; }  // must return RewardOutput
};
}  // namespace

static_assert(Scorer<Gsm8kScorer> && Scorer<MathRewardScorer> && Scorer<MathDapoScorer>);
static_assert(!Scorer<NotAScorer>);

TEST(RewardFunctionConcept, AcceptsVerlsCustomRewardShapes) {
  auto plain = [](std::string_view, std::string_view solution, std::string_view) { return solution.size() > 3 ? 1 : 0; };
  auto with_extra = [](std::string_view, std::string_view, std::string_view, const ExtraInfo& extra) {
    return RewardOutput{extra.contains("bonus") ? 2.0 : 0.5, true, "p"};
  };
  auto wrong_args = [](int) { return 1.0; };
  auto wrong_result = [](std::string_view, std::string_view, std::string_view) { return std::string("1"); };
  static_assert(RewardFunction<decltype(plain)>);
  static_assert(RewardFunction<decltype(with_extra)>);
  static_assert(RewardFunctionWithExtraInfo<decltype(with_extra)>);
  static_assert(RewardFunction<DefaultRewardFunction>);
  static_assert(!RewardFunction<decltype(wrong_args)>);
  static_assert(!RewardFunction<decltype(wrong_result)>);

  EXPECT_EQ(call_reward_function(plain, "d", "long answer", "g").score, 1.0);
  EXPECT_EQ(call_reward_function(with_extra, "d", "s", "g", ExtraInfo{{"bonus", "1"}}).score, 2.0);
  EXPECT_EQ(call_reward_function(with_extra, "d", "s", "g").score, 0.5);
  DefaultRewardFunction verl_default;
  EXPECT_EQ(call_reward_function(verl_default, "openai/gsm8k", "#### 4", "4").score, 1.0);
}
