// Per-group mean and standard deviation of the response scores, in the two ways verl computes
// them (they round differently, and the golden `tiny_spread` cases tell them apart):
//  * the per-group loops (grpo, gpg, rloo, opo, ...) call torch.mean / torch.std on each group;
//  * grpo_vectorized calls verl.utils.groupwise.group_mean_std, float32 index_add_ sums.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "verl/algo/advantages/detail/prompt_groups.hpp"
#include "verl/algo/advantages/detail/torch_sum.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo::detail {

struct GroupMoments {
  std::vector<float> mean;  ///< per group
  std::vector<float> std;   ///< per group (unbiased)
};

/// torch.mean(x) of float32 x: torch's float32 sum divided in float32 by n.
/// torch.std(x) on CPU: two passes in double around that float32 mean, sqrt in double, then
/// rounded to float32. A group of one gets mean 0 and std 1, as verl's loops assign.
inline GroupMoments torch_group_moments(const VectorF& scores, const PromptGroups& groups) {
  const auto num_groups = static_cast<std::size_t>(groups.num_groups());
  GroupMoments out{std::vector<float>(num_groups), std::vector<float>(num_groups)};
  std::vector<float> members;
  for (Index g = 0; g < groups.num_groups(); ++g) {
    const auto rows = groups.rows_of(g);
    members.clear();
    for (const Index row : rows) members.push_back(scores[row]);
    const auto n = static_cast<Index>(rows.size());
    out.mean[static_cast<std::size_t>(g)] = n > 1 ? torch_sum(members.data(), n) / static_cast<float>(n) : 0.0f;
  }
  std::vector<double> squares(num_groups, 0.0);
  for (Index i = 0; i < scores.size(); ++i) {
    const auto g = static_cast<std::size_t>(groups.group_of(i));
    const double d = static_cast<double>(scores[i]) - static_cast<double>(out.mean[g]);
    squares[g] += d * d;
  }
  for (std::size_t g = 0; g < num_groups; ++g) {
    const Index n = groups.size_of(static_cast<Index>(g));
    out.std[g] = n > 1 ? static_cast<float>(std::sqrt(squares[g] / static_cast<double>(n - 1))) : 1.0f;
  }
  return out;
}

/// verl.utils.groupwise.group_mean_std as verl 0.9.1 calls it (eps = 0): float32 count and sum
/// accumulated in batch order (index_add_), mean = S1 / n, then a second pass for
/// var = sum((s - mean)^2) / max(n - 1, 1), std = sqrt(max(var, 0)); a group of one gets mean 0
/// and std 1. Every step is float32, as in torch.
inline GroupMoments groupwise_mean_std(const VectorF& scores, const PromptGroups& groups) {
  const auto num_groups = static_cast<std::size_t>(groups.num_groups());
  std::vector<float> count(num_groups, 0.0f), s1(num_groups, 0.0f), squares(num_groups, 0.0f);
  for (Index i = 0; i < scores.size(); ++i) {
    const auto g = static_cast<std::size_t>(groups.group_of(i));
    count[g] += 1.0f;
    s1[g] += scores[i];
  }
  GroupMoments out{std::vector<float>(num_groups), std::vector<float>(num_groups)};
  for (std::size_t g = 0; g < num_groups; ++g) out.mean[g] = count[g] > 1.0f ? s1[g] / count[g] : 0.0f;
  for (Index i = 0; i < scores.size(); ++i) {
    const auto g = static_cast<std::size_t>(groups.group_of(i));
    const float d = scores[i] - out.mean[g];
    squares[g] += d * d;
  }
  for (std::size_t g = 0; g < num_groups; ++g) {
    if (count[g] <= 1.0f) {
      out.std[g] = 1.0f;
      continue;
    }
    const float var = squares[g] / (count[g] - 1.0f);  // n > 1: torch's clamp_min(1) is a no-op
    // torch.clamp(var, min=0) keeps a NaN; std::max would not.
    out.std[g] = std::sqrt(std::isnan(var) ? var : std::max(var, 0.0f));
  }
  return out;
}

}  // namespace verl::algo::detail
