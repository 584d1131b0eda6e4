// torch's CPU float32 sum of a contiguous run, reproduced bit for bit. verl's group statistics
// divide by a standard deviation that can be tiny (groups of near-equal scores, a whitened batch
// of near-equal returns), which turns a one-ulp difference in a sum into a visible one in the
// advantage; summing in torch's order removes that source of disagreement.
//
// The order is aten's cascade_sum (ReduceOps SumKernel) as dispatched with 8-float vectors (the
// AVX2 and default CPU builds; the golden fixtures' masked_sum outputs match it exactly): the run
// is read as 8-lane vectors, four at a time (instruction-level parallelism), into float32
// accumulators that spill into three coarser levels every 2^level_power blocks; leftover vectors
// join the first accumulator, the four are added up, then the scalar tail and the eight lanes are
// added to 0 in that order. Runs shorter than 8 are summed as four interleaved scalars.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "verl/core/tensor.hpp"

namespace verl::algo::detail {

class TorchFloatSum {
 public:
  /// A sum of exactly `total` floats, fed in order by add().
  explicit TorchFloatSum(Index total)
      : total_(total),
        vectors_(total / kLanes),
        blocks_(total >= kLanes ? vectors_ / kIlp : 0),
        block_end_(blocks_ * kBlock),
        level_power_(std::max<int>(4, ceil_log2(blocks_) / 4)),
        level_mask_((Index{1} << level_power_) - 1) {}

  /// Appends the next `n` floats of the run.
  void add(const float* x, Index n) {
    while (n > 0) {
      if (position_ < block_end_) {
        if (pending_ == 0) {
          const Index full = std::min(n, block_end_ - position_) / kBlock;
          for (Index b = 0; b < full; ++b) add_block(x + b * kBlock);
          x += full * kBlock;
          n -= full * kBlock;
          position_ += full * kBlock;
          if (n == 0 || position_ == block_end_) continue;
        }
        const Index take = std::min({n, kBlock - pending_, block_end_ - position_});
        std::copy(x, x + take, pending_block_ + pending_);
        pending_ += take;
        x += take;
        n -= take;
        position_ += take;
        if (pending_ == kBlock) {
          add_block(pending_block_);
          pending_ = 0;
        }
      } else {
        // What follows the full blocks: at most 3 vectors and 7 scalars.
        const Index take = std::min(n, total_ - position_);
        std::copy(x, x + take, rest_ + (position_ - block_end_));
        position_ += take;
        x += take;
        n -= take;
        if (take == 0) break;  // more floats than announced; result() reports it
      }
    }
  }

  /// The float32 sum torch computes; requires exactly `total` floats to have been added.
  float result() const {
    if (total_ < kLanes) {
      // Scalar row_sum: four interleaved partial sums, the remainder into the first.
      float partial[kIlp] = {0, 0, 0, 0};
      const Index interleaved = (total_ / kIlp) * kIlp;
      for (Index i = 0; i < interleaved; ++i) partial[i % kIlp] += rest_[i];
      for (Index i = interleaved; i < total_; ++i) partial[0] += rest_[i];
      return ((partial[0] + partial[1]) + partial[2]) + partial[3];
    }
    float partial[kBlock];
    for (Index e = 0; e < kBlock; ++e) partial[e] = levels_[0][e];
    for (int level = 1; level < kLevels; ++level)
      for (Index e = 0; e < kBlock; ++e) partial[e] += levels_[level][e];
    const Index leftover_vectors = vectors_ - blocks_ * kIlp;
    for (Index v = 0; v < leftover_vectors; ++v)
      for (Index lane = 0; lane < kLanes; ++lane) partial[lane] += rest_[v * kLanes + lane];
    for (Index k = 1; k < kIlp; ++k)
      for (Index lane = 0; lane < kLanes; ++lane) partial[lane] += partial[k * kLanes + lane];
    float sum = 0;
    for (Index i = leftover_vectors * kLanes; i < total_ - block_end_; ++i) sum += rest_[i];
    for (Index lane = 0; lane < kLanes; ++lane) sum += partial[lane];
    return sum;
  }

  Index total() const { return total_; }
  Index added() const { return position_; }

 private:
  static constexpr Index kLanes = 8;   // floats per vector
  static constexpr Index kIlp = 4;     // vectors summed side by side
  static constexpr Index kBlock = kLanes * kIlp;
  static constexpr int kLevels = 4;

  // aten's utils::CeilLog2 (1 for x <= 2).
  static int ceil_log2(Index x) {
    if (x <= 2) return 1;
    return static_cast<int>(std::bit_width(static_cast<std::uint64_t>(x - 1)));
  }

  void add_block(const float* x) {
    for (Index e = 0; e < kBlock; ++e) levels_[0][e] += x[e];
    ++blocks_done_;
    if ((blocks_done_ & level_mask_) != 0) return;
    // Every 2^level_power blocks, spill each level into the next while the block count is a
    // multiple of that level's span.
    for (int level = 1; level < kLevels; ++level) {
      for (Index e = 0; e < kBlock; ++e) {
        levels_[level][e] += levels_[level - 1][e];
        levels_[level - 1][e] = 0;
      }
      if ((blocks_done_ & (level_mask_ << (level * level_power_))) != 0) break;
    }
  }

  Index total_;
  Index vectors_;
  Index blocks_;
  Index block_end_;
  int level_power_;
  Index level_mask_;
  Index position_ = 0;
  Index blocks_done_ = 0;
  Index pending_ = 0;
  float levels_[kLevels][kBlock] = {};
  float pending_block_[kBlock] = {};
  float rest_[kBlock] = {};  // the leftover vectors and the scalar tail (at most 31 floats)
};

/// torch.sum of n contiguous float32 values.
inline float torch_sum(const float* x, Index n) {
  TorchFloatSum sum(n);
  sum.add(x, n);
  return sum.result();
}

}  // namespace verl::algo::detail
