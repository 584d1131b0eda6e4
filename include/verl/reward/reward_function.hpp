// The RewardFunction concept: a user-supplied reward, called like verl's custom reward function
// `compute_score(data_source, solution_str, ground_truth, extra_info=None)`.
#pragma once

#include <concepts>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "verl/config.hpp"
#include "verl/reward/scorer.hpp"

namespace verl::reward {

/// verl's per-sample `extra_info` dict, with its values as strings (e.g. {"split", "train"}).
using ExtraInfo = std::map<std::string, std::string, std::less<>>;

/// What a reward function may return: a number (verl's float / int / bool) or a RewardOutput
/// (verl's dict with "score").
template <class R>
concept RewardValue = std::convertible_to<R, double> || std::convertible_to<R, RewardOutput>;

/// Callable as f(data_source, solution_str, ground_truth, extra_info) -> RewardValue.
template <class F>
concept RewardFunctionWithExtraInfo =
    std::invocable<F&, std::string_view, std::string_view, std::string_view, const ExtraInfo&> &&
    RewardValue<std::invoke_result_t<F&, std::string_view, std::string_view, std::string_view, const ExtraInfo&>>;

/// A reward function: callable as f(data_source, solution_str, ground_truth) or with a fourth
/// `const ExtraInfo&` argument, returning a number or a RewardOutput.
template <class F>
concept RewardFunction =
    RewardFunctionWithExtraInfo<F> ||
    (std::invocable<F&, std::string_view, std::string_view, std::string_view> &&
     RewardValue<std::invoke_result_t<F&, std::string_view, std::string_view, std::string_view>>);

/// A reward function's result as a RewardOutput (a number becomes its score, as verl's float()).
template <RewardValue R>
RewardOutput to_reward_output(R&& value) {
  if constexpr (std::convertible_to<R, RewardOutput>) {
    return RewardOutput(std::forward<R>(value));
  } else {
    RewardOutput out;
    out.score = static_cast<double>(value);
    return out;
  }
}

/// Calls `reward_fn` on one response, passing `extra_info` when it takes one.
template <class F>
RewardOutput call_reward_function(F& reward_fn, std::string_view data_source, std::string_view solution_str,
                                  std::string_view ground_truth, const ExtraInfo& extra_info = {}) {
  VERL_STATIC_ASSERT(RewardFunction<F>,
                     REWARD_FUNCTION_MUST_TAKE_DATA_SOURCE_SOLUTION_STR_GROUND_TRUTH_AND_RETURN_A_SCORE);
  if constexpr (RewardFunctionWithExtraInfo<F>) {
    return to_reward_output(std::invoke(reward_fn, data_source, solution_str, ground_truth, extra_info));
  } else {
    return to_reward_output(std::invoke(reward_fn, data_source, solution_str, ground_truth));
  }
}

}  // namespace verl::reward
