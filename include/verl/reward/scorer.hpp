// The Scorer concept: a rule-based scoring policy (gsm8k, math_reward, math_dapo) as a small value
// type whose knobs are members, named after verl's scorer module, and callable on one response.
#pragma once

#include <concepts>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace verl::reward {

/// What verl's default_compute_score returns for one response. Most scorers return a float;
/// math_dapo returns the dict {"score", "acc", "pred"}, whose extra entries are `acc` and `pred`.
/// `acc` is set exactly when verl returns a dict; `pred` may still be empty then (verl's None).
/// A user's reward function may return further named numbers (verl's dict entries beyond "score",
/// e.g. {"score", "format_reward", "accuracy_reward"} for GDPO) in `components`.
struct RewardOutput {
  double score = 0.0;
  std::optional<bool> acc;
  std::optional<std::string> pred;
  std::map<std::string, double, std::less<>> components{};

  bool has_extra_info() const { return acc.has_value() || !components.empty(); }

  /// The number verl's reward manager stores under `key` (its reward_extra_info): "score", "acc"
  /// (as 1 / 0) or a component; nullopt when this output has no number of that name.
  [[nodiscard]] std::optional<double> named_score(std::string_view key) const {
    if (key == "score") return score;
    if (key == "acc" && acc) return *acc ? 1.0 : 0.0;
    if (const auto found = components.find(key); found != components.end()) return found->second;
    return std::nullopt;
  }
  /// The names named_score() answers, for error messages.
  [[nodiscard]] std::vector<std::string> score_names() const {
    std::vector<std::string> names{"score"};
    if (acc) names.emplace_back("acc");
    for (const auto& [name, value] : components) names.push_back(name);
    return names;
  }
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
