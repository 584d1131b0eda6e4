// verl's default_compute_score (verl/utils/reward_score/__init__.py): picks the rule-based
// scorer for a sample's data source and scores the response. Also the scorer registry by verl's
// module names and default_compute_score as a RewardFunction value.
#pragma once

#include <array>
#include <string_view>
#include <variant>

#include "verl/core/error.hpp"
#include "verl/reward/gsm8k.hpp"
#include "verl/reward/math_dapo.hpp"
#include "verl/reward/math_reward.hpp"
#include "verl/reward/reward_function.hpp"
#include "verl/reward/scorer.hpp"
#include "verl/core/type_list.hpp"

namespace verl::reward {

static_assert(Scorer<Gsm8kScorer> && Scorer<MathRewardScorer> && Scorer<MathDapoScorer>);

/// verl's rule-based scorers that are ported, by module name: the one list of the family. The
/// variant, the names and make_scorer derive from it.
using Scorers = TypeList<Gsm8kScorer, MathRewardScorer, MathDapoScorer>;

/// Any of the ported scorers, as a value.
using AnyScorer = variant_of_t<Scorers>;

/// verl's module names of the ported scorers, the keys of make_scorer.
inline constexpr auto scorer_names = names_of(Scorers{});

/// The scorer registered under verl's module name, with verl's default knobs.
inline AnyScorer make_scorer(std::string_view name) {
  AnyScorer scorer;
  if (visit_by_name(Scorers{}, name, [&](auto type) { scorer.template emplace<typename decltype(type)::type>(); }))
    return scorer;
  ::verl::detail::throw_invalid_argument("scorer name: expected one of {}, got '{}'", joined_names_of<Scorers>(), name);
}

namespace detail {

inline constexpr std::array<std::string_view, 3> math_reward_sources{
    "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"};
inline constexpr std::array<std::string_view, 3> math_dapo_sources{"math_dapo", "math", "math_dapo_reasoning"};

/// Data sources verl scores with modules verl-cpp does not port (prime_math, prime_code or
/// sandbox_fusion, geo3k, search_r1_like_qa_em).
inline constexpr std::array<std::string_view, 18> unported_sources{
    "numina_aops_forum", "numina_synthetic_math", "numina_amc_aime", "numina_synthetic_amc", "numina_cn_k12",
    "numina_olympiads", "codecontests", "apps", "codeforces", "taco", "hiyouga/geometry3k", "searchR1_nq",
    "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa", "searchR1_2wikimultihopqa", "searchR1_musique",
    "searchR1_bamboogle"};

template <std::size_t N>
constexpr bool contains(const std::array<std::string_view, N>& names, std::string_view name) {
  for (const auto candidate : names)
    if (candidate == name) return true;
  return false;
}

}  // namespace detail

/// The scorer verl's default_compute_score uses for `data_source` (verl's defaults: gsm8k
/// strict, math_dapo non-strict). Throws NotImplemented for data sources whose verl scorer is not
/// ported, InvalidArgument for data sources verl does not know (verl raises NotImplementedError
/// for both).
inline AnyScorer scorer_for_data_source(std::string_view data_source) {
  if (data_source == "openai/gsm8k") return Gsm8kScorer{};
  if (detail::contains(detail::math_reward_sources, data_source)) return MathRewardScorer{};
  if (detail::contains(detail::math_dapo_sources, data_source) || data_source.starts_with("aime"))
    return MathDapoScorer{};
  if (detail::contains(detail::unported_sources, data_source)) {
    ::verl::detail::throw_not_implemented(
        "data_source: verl scores '{}' with a scorer verl-cpp does not port (prime_math, prime_code, "
        "sandbox_fusion, geo3k or search_r1); pass your own RewardFunction",
        data_source);
  }
  ::verl::detail::throw_invalid_argument(
      "data_source: expected one of openai/gsm8k, lighteval/MATH, DigitalLearningGmbH/MATH-lighteval, "
      "HuggingFaceH4/MATH-500, math_dapo, math, math_dapo_reasoning or a name starting with 'aime', got '{}'",
      data_source);
}

/// Scores one response with whichever scorer `scorer` holds.
inline RewardOutput score(const AnyScorer& scorer, std::string_view solution_str, std::string_view ground_truth) {
  return std::visit([&](const auto& s) { return s(solution_str, ground_truth); }, scorer);
}

/// verl's default_compute_score: a float score, or for math_dapo its dict (score, acc, pred).
inline RewardOutput default_compute_score(std::string_view data_source, std::string_view solution_str,
                                          std::string_view ground_truth) {
  return score(scorer_for_data_source(data_source), solution_str, ground_truth);
}

/// default_compute_score as a RewardFunction, the reward a trainer uses when none is supplied.
struct DefaultRewardFunction {
  RewardOutput operator()(std::string_view data_source, std::string_view solution_str,
                          std::string_view ground_truth) const {
    return default_compute_score(data_source, solution_str, ground_truth);
  }
};

static_assert(RewardFunction<DefaultRewardFunction>);

}  // namespace verl::reward
