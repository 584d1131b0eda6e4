// The Scorer concept: a rule-based scoring policy (gsm8k, math_reward, math_dapo) as a small value
// type whose knobs are members, named after verl's scorer module, and callable on one response.
#pragma once

#include <concepts>
#include <optional>
#include <string>
#include <string_view>

namespace verl::reward {

/// What verl's default_compute_score returns for one response. Most scorers return a float;
/// math_dapo returns the dict {"score", "acc", "pred"}, whose extra entries are `acc` and `pred`.
/// `acc` is set exactly when verl returns a dict; `pred` may still be empty then (verl's None).
struct RewardOutput {
  double score = 0.0;
  std::optional<bool> acc;
  std::optional<std::string> pred;

  bool has_extra_info() const { return acc.has_value(); }
  friend bool operator==(const RewardOutput&, const RewardOutput&) = default;
};

/// A scoring policy: `S::name` is verl's module name (`verl.utils.reward_score.<name>`) and
/// `scorer(solution_str, ground_truth)` scores one response.
template <class S>
concept Scorer = std::copyable<S> && requires(const S& scorer, std::string_view text) {
  { S::name } -> std::convertible_to<std::string_view>;
  { scorer(text, text) } -> std::same_as<RewardOutput>;
};

}  // namespace verl::reward
