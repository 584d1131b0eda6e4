// Executing a reshard plan: training-layout parameter shards become generation-layout shards by
// one all-gather inside the strategy's gather group (HybridFlow: the micro-DP group), followed by
// local strided copies that put every gathered training shard at its place in the generation
// shard; and back (HybridFlow only: a rank's training shard is a piece of its generation shard,
// so going back needs no communication).
//
// Buffers are flat: a rank's training buffer holds, for each layer of its training stage in
// order, each parameter's training TP shard (ParamShard layout); its generation buffer holds the
// same for the layers of its generation stage and the generation TP shards.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/parallel/communicator.hpp"
#include "verl/parallel/param_shard.hpp"
#include "verl/parallel/rank_group.hpp"
#include "verl/parallel/reshard_plan.hpp"

namespace verl::parallel {

/// The parameters to reshard: `num_layers` identical layers, each holding `layer_params`.
struct ModelSpec {
  std::int64_t num_layers = 0;
  std::vector<ParamSpec> layer_params;

  std::int64_t numel() const {
    std::int64_t n = 0;
    for (const ParamSpec& p : layer_params) n += p.numel();
    return n * num_layers;
  }
};

template <ReshardStrategy S, CommElement T>
class Resharder {
 public:
  Resharder(const ReshardPlan<S>& plan, const ModelSpec& model, std::int64_t rank)
      : plan_(plan), model_(model), rank_(rank), gather_group_(plan.gather_group(rank)) {
    const ReshardGeometry& g = plan.geometry();
    VERL_CHECK_ARG(model.num_layers > 0 && model.num_layers % g.train_pp == 0,
                   "model: expected a positive number of layers divisible by the training pp {}, got {}", g.train_pp,
                   model.num_layers);
    VERL_CHECK_ARG(!model.layer_params.empty(), "model: expected at least one parameter per layer, got none{}", "");
    const ParallelCoords train = g.train_coords(rank);
    const ParallelCoords gen = plan.generation_coords(rank);
    const std::int64_t train_layers = model.num_layers / g.train_pp;
    const std::int64_t gen_layers = model.num_layers / g.gen_pp;

    // Per-layer offsets of each parameter inside the training and generation buffers.
    std::vector<std::int64_t> train_offset, gen_offset;
    std::int64_t train_per_layer = 0, gen_per_layer = 0;
    for (const ParamSpec& p : model.layer_params) {
      train_offset.push_back(train_per_layer);
      gen_offset.push_back(gen_per_layer);
      train_per_layer += tp_shard(p, g.train_tp, 0).size();
      gen_per_layer += tp_shard(p, g.gen_tp, gen.tp).size();
    }
    training_size_ = train_layers * train_per_layer;
    generation_size_ = gen_layers * gen_per_layer;
    contribution_size_ = S::splits_contribution_over_dp ? (training_size_ + g.train_dp - 1) / g.train_dp : training_size_;

    // The training shards (tp j, stage s) that make up this rank's generation shard, and the
    // copies that place them: generation TP shard gen.tp spans training TP shards
    // [gen.tp * t/tg, (gen.tp + 1) * t/tg), generation stage gen.pp spans training stages
    // [gen.pp * p/pg, (gen.pp + 1) * p/pg).
    const std::int64_t kt = g.micro_dp_tp(), kp = g.micro_dp_pp();
    for (std::int64_t s = gen.pp * kp; s < (gen.pp + 1) * kp; ++s) {
      for (std::int64_t j = gen.tp * kt; j < (gen.tp + 1) * kt; ++j) {
        Source source{j, s, {}};
        const bool own = j == train.tp && s == train.pp;
        for (std::size_t k = 0; k < model.layer_params.size(); ++k) {
          const ParamSpec& p = model.layer_params[k];
          // A replicated parameter is the same in every TP shard: gather it from one.
          const bool gathered = p.split != TensorParallelSplit::replicated || j == gen.tp * kt;
          if (!gathered && !own) continue;
          const ShardPlacement placement = place_shard(tp_shard(p, g.train_tp, j), tp_shard(p, g.gen_tp, gen.tp));
          for (std::int64_t l = 0; l < train_layers; ++l) {
            const std::int64_t gen_layer = (s - gen.pp * kp) * train_layers + l;
            const std::int64_t src = l * train_per_layer + train_offset[k];
            const std::int64_t dst = gen_layer * gen_per_layer + gen_offset[k];
            for (std::size_t c = 0; c < placement.num_copies; ++c) {
              StridedCopy copy = placement.copies[c];
              copy.src += src;
              copy.dst += dst;
              if (gathered) source.copies.push_back(copy);
              if (own) own_copies_.push_back(copy);
            }
          }
        }
        sources_.push_back(std::move(source));
      }
    }
  }

  std::int64_t training_size() const noexcept { return training_size_; }
  std::int64_t generation_size() const noexcept { return generation_size_; }
  /// Elements this rank sends into the all-gather (its training buffer, or a 1/d part of it).
  std::int64_t contribution_size() const noexcept { return contribution_size_; }
  /// The ranks to all-gather with; build the communicator with sub_communicator(world, group).
  const RankGroup& gather_group() const noexcept { return gather_group_; }
  const ReshardPlan<S>& plan() const noexcept { return plan_; }

  /// Training shards -> generation shard. `gather_comm` is the communicator of gather_group()
  /// (its rank i is member i).
  template <Communicator C>
  void to_generation(C& gather_comm, std::span<const T> training, std::span<T> generation) {
    VERL_CHECK_ARG(static_cast<std::int64_t>(training.size()) == training_size_,
                   "training: expected length {}, got {}", training_size_, training.size());
    VERL_CHECK_ARG(static_cast<std::int64_t>(generation.size()) == generation_size_,
                   "generation: expected length {}, got {}", generation_size_, generation.size());
    VERL_CHECK_ARG(gather_comm.size() == gather_group_.size() && gather_comm.rank() == *gather_group_.index_of(rank_),
                   "gather_comm: expected the communicator of the gather group {} (size {}, rank {}), got size {}, rank {}",
                   to_string(gather_group_), gather_group_.size(), *gather_group_.index_of(rank_), gather_comm.size(),
                   gather_comm.rank());
    gathered_.resize(static_cast<std::size_t>(contribution_size_ * gather_group_.size()));
    if constexpr (S::splits_contribution_over_dp) {
      // ZeRO-3 style: this rank sends the dp-th 1/d part of its training buffer.
      const std::int64_t dp = plan_.geometry().train_coords(rank_).dp;
      contribution_.assign(static_cast<std::size_t>(contribution_size_), T{});
      const std::int64_t begin = std::min(dp * contribution_size_, training_size_);
      const std::int64_t end = std::min(begin + contribution_size_, training_size_);
      std::copy(training.begin() + begin, training.begin() + end, contribution_.begin());
      gather_comm.all_gather(std::span<const T>(contribution_), std::span<T>(gathered_));
    } else {
      gather_comm.all_gather(training, std::span<T>(gathered_));
    }
    for (const Source& source : sources_) {
      const T* from = training_buffer_of(source);
      for (const StridedCopy& c : source.copies) apply(c, from, generation.data());
    }
  }

  /// Generation shard -> this rank's training shard, without communication (HybridFlow keeps
  /// the training shard inside the generation shard).
  void to_training(std::span<const T> generation, std::span<T> training) const
    requires(S::keeps_training_shard_in_place)
  {
    VERL_CHECK_ARG(static_cast<std::int64_t>(generation.size()) == generation_size_,
                   "generation: expected length {}, got {}", generation_size_, generation.size());
    VERL_CHECK_ARG(static_cast<std::int64_t>(training.size()) == training_size_,
                   "training: expected length {}, got {}", training_size_, training.size());
    for (const StridedCopy& c : own_copies_) {
      for (std::int64_t r = 0; r < c.count; ++r) {
        const T* from = generation.data() + c.dst + r * c.dst_stride;
        std::copy(from, from + c.length, training.data() + c.src + r * c.src_stride);
      }
    }
  }

 private:
  struct Source {
    std::int64_t tp;     ///< training TP shard
    std::int64_t stage;  ///< training PP stage
    std::vector<StridedCopy> copies;
  };

  static void apply(const StridedCopy& c, const T* from, T* to) {
    for (std::int64_t r = 0; r < c.count; ++r) {
      const T* begin = from + c.src + r * c.src_stride;
      std::copy(begin, begin + c.length, to + c.dst + r * c.dst_stride);
    }
  }

  /// Where the training buffer of (source.tp, source.stage) sits after the all-gather; under
  /// ZeRO-3 it is first reassembled from the d parts sent by the dp replicas.
  const T* training_buffer_of(const Source& source) {
    const ReshardGeometry& g = plan_.geometry();
    const std::int64_t dp = g.train_coords(rank_).dp;
    if constexpr (S::splits_contribution_over_dp) {
      assembled_.resize(static_cast<std::size_t>(contribution_size_ * g.train_dp));
      for (std::int64_t part = 0; part < g.train_dp; ++part) {
        const std::int64_t member = *gather_group_.index_of(g.train_rank({source.tp, source.stage, part}));
        const auto begin = gathered_.begin() + member * contribution_size_;
        std::copy(begin, begin + contribution_size_, assembled_.begin() + part * contribution_size_);
      }
      return assembled_.data();
    } else {
      const std::int64_t member = *gather_group_.index_of(g.train_rank({source.tp, source.stage, dp}));
      return gathered_.data() + member * contribution_size_;
    }
  }

  ReshardPlan<S> plan_;
  ModelSpec model_;
  std::int64_t rank_;
  RankGroup gather_group_;
  std::int64_t training_size_ = 0, generation_size_ = 0, contribution_size_ = 0;
  std::vector<Source> sources_;
  std::vector<StridedCopy> own_copies_;
  std::vector<T> gathered_, contribution_, assembled_;
};

}  // namespace verl::parallel
