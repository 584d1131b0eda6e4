// A ZeRO-style sharded optimizer step over a data-parallel group: reduce-scatter the gradients
// (each rank gets the mean of its 1/d slice), update that slice of the parameters with the
// slice's optimizer state, and all-gather the parameters. Equal to all-reducing the gradients
// and stepping the whole model everywhere, with 1/d of the optimizer state per rank.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/parallel/communicator.hpp"
#include "verl/parallel/elementwise_optimizer.hpp"

namespace verl::parallel {

template <ElementwiseOptimizer O>
class ZeroOptimizer {
 public:
  /// `numel` parameters sharded over `world_size` ranks; `rank` owns elements
  /// [shard_begin(), shard_end()) (the last shards may be shorter or empty).
  ZeroOptimizer(O optimizer, std::int64_t numel, int rank, int world_size)
      : optimizer_(std::move(optimizer)), numel_(numel), rank_(rank), world_size_(world_size) {
    VERL_CHECK_ARG(numel >= 0, "numel: expected a non-negative count, got {}", numel);
    VERL_CHECK_ARG(world_size > 0 && rank >= 0 && rank < world_size,
                   "rank: expected a rank in [0, {}), got {}", world_size, rank);
    shard_size_ = (numel + world_size - 1) / world_size;
    padded_grads_.assign(static_cast<std::size_t>(shard_size_ * world_size), 0.0f);
    gathered_.resize(padded_grads_.size());
    grad_shard_.resize(static_cast<std::size_t>(shard_size_));
    param_shard_.resize(static_cast<std::size_t>(shard_size_));
  }

  std::int64_t shard_begin() const noexcept { return std::min(numel_, rank_ * shard_size_); }
  std::int64_t shard_end() const noexcept { return std::min(numel_, (rank_ + 1) * shard_size_); }
  const O& optimizer() const noexcept { return optimizer_; }

  /// `params`: the full parameters (identical on every rank, updated in place);
  /// `grads`: this rank's local gradients of all parameters (not yet reduced).
  template <Communicator C>
  void step(C& dp, std::span<float> params, std::span<const float> grads) {
    VERL_CHECK_ARG(dp.size() == world_size_ && dp.rank() == rank_,
                   "dp: expected a communicator of {} ranks at rank {}, got {} ranks at rank {}", world_size_, rank_,
                   dp.size(), dp.rank());
    VERL_CHECK_ARG(static_cast<std::int64_t>(params.size()) == numel_, "params: expected length {}, got {}", numel_,
                   params.size());
    VERL_CHECK_ARG(static_cast<std::int64_t>(grads.size()) == numel_, "grads: expected length {}, got {}", numel_,
                   grads.size());
    std::copy(grads.begin(), grads.end(), padded_grads_.begin());  // the padding stays 0
    dp.reduce_scatter(std::span<const float>(padded_grads_), std::span<float>(grad_shard_), ReduceOp::avg);

    const std::int64_t begin = shard_begin(), owned = shard_end() - begin;
    std::span<float> mine = params.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(owned));
    if (owned > 0) optimizer_.step(mine, std::span<const float>(grad_shard_).first(static_cast<std::size_t>(owned)));

    std::fill(param_shard_.begin(), param_shard_.end(), 0.0f);
    std::copy(mine.begin(), mine.end(), param_shard_.begin());
    dp.all_gather(std::span<const float>(param_shard_), std::span<float>(gathered_));
    std::copy_n(gathered_.begin(), numel_, params.begin());
  }

 private:
  O optimizer_;
  std::int64_t numel_;
  std::int64_t rank_;
  int world_size_;
  std::int64_t shard_size_ = 0;
  std::vector<float> padded_grads_, grad_shard_, param_shard_, gathered_;
};

}  // namespace verl::parallel
