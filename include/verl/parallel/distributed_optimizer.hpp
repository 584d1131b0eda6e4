// Megatron's distributed optimizer (use_distributed_optimizer, ZeRO-1) for AdamW over a model's
// parameter tensors: the tensors are laid end to end in one flat index space (in the order the
// caller passes them, every step the same) of `numel` elements, padded to a multiple of the
// data-parallel size d and cut into d equal slices; rank r keeps AdamW's moments for slice r only.
// A step is three phases, so that the caller can clip between them with a global norm:
//
//   reduce_scatter_gradients(dp, params)  the DP mean of this rank's slice of the gradients
//                                         (one in-place reduce-scatter of a flat copy)
//   for_each_segment / slice_gradients()  the caller's norm over the slice, and its scaling
//   step(dp, params, config)              AdamW on the slice's elements (optim's kernel, as
//                                         optim::AdamW: the same element arithmetic), then one
//                                         in-place all-gather of the parameters
//   skip()                                or no update (a non-finite norm), the buffer released
//
// The flat buffer lives only between the first and the last phase (one copy of the parameters'
// size; the model's own gradient tensors are the gradient buffer Megatron keeps contiguous).
// Equal to all-reducing the gradients and stepping optim::AdamW on every rank, with 1/d of the
// moments per rank: gather_moments / load_moments move them to and from the full layout
// (optim::AdamW::State, one vector per tensor) for checkpoints.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/parameter.hpp"
#include "verl/parallel/communicator.hpp"

namespace verl::parallel {

class DistributedAdamW {
 public:
  /// A run of this rank's slice inside one tensor: the tensor's elements [begin, begin + length)
  /// are the slice's elements [slice_offset, slice_offset + length).
  struct Segment {
    std::size_t tensor;
    std::int64_t begin;
    std::int64_t length;
    std::int64_t slice_offset;
  };

  /// The moments of this rank's slice (flat) and the step count (AdamW's bias correction).
  struct State {
    std::int64_t step = 0;
    std::vector<float> exp_avg, exp_avg_sq;
    friend bool operator==(const State&, const State&) = default;
  };

  /// `tensor_sizes`: the element counts of the tensors, in the order every call passes them.
  DistributedAdamW(std::vector<std::int64_t> tensor_sizes, int rank, int world_size)
      : tensor_sizes_(std::move(tensor_sizes)), rank_(rank), world_size_(world_size) {
    VERL_CHECK_ARG(world_size > 0 && rank >= 0 && rank < world_size, "rank: expected a rank in [0, {}), got {}",
                   world_size, rank);
    std::int64_t offset = 0;
    for (std::size_t k = 0; k < tensor_sizes_.size(); ++k) {
      VERL_CHECK_ARG(tensor_sizes_[k] >= 0, "tensor_sizes[{}]: expected a non-negative count, got {}", k, tensor_sizes_[k]);
      offsets_.push_back(offset);
      offset += tensor_sizes_[k];
    }
    numel_ = offset;
    slice_size_ = (numel_ + world_size - 1) / world_size;
    const std::int64_t begin = slice_begin(), end = slice_end();
    for (std::size_t k = 0; k < tensor_sizes_.size(); ++k) {
      const std::int64_t lo = std::max(begin, offsets_[k]), hi = std::min(end, offsets_[k] + tensor_sizes_[k]);
      if (lo < hi) segments_.push_back({k, lo - offsets_[k], hi - lo, lo - begin});
    }
  }

  [[nodiscard]] std::int64_t numel() const noexcept { return numel_; }
  /// Elements per slice (the last slices may own fewer: the padding).
  [[nodiscard]] std::int64_t slice_size() const noexcept { return slice_size_; }
  [[nodiscard]] std::int64_t slice_begin() const noexcept { return std::min(numel_, rank_ * slice_size_); }
  [[nodiscard]] std::int64_t slice_end() const noexcept { return std::min(numel_, (rank_ + 1) * slice_size_); }
  [[nodiscard]] std::int64_t owned() const noexcept { return slice_end() - slice_begin(); }
  [[nodiscard]] std::span<const Segment> segments() const noexcept { return segments_; }
  [[nodiscard]] const State& state() const noexcept { return state_; }

  /// Phase 1 (collective over `dp`): the mean over the DP group of this rank's slice of the
  /// gradients (`owned()` elements; scale them in place to clip).
  template <ReduceScattersInPlace C>
  std::span<float> reduce_scatter_gradients(C& dp, std::span<const optim::ParameterRef> params) {
    check_group(dp);
    check_params(params);
    flat_.assign(static_cast<std::size_t>(slice_size_ * world_size_), 0.0f);  // the padding stays 0
    for (std::size_t k = 0; k < params.size(); ++k)
      std::copy(params[k].grad.begin(), params[k].grad.end(), flat_.begin() + offsets_[k]);
    dp.reduce_scatter_in_place(std::span<float>(flat_), ReduceOp::avg);
    reduced_ = true;
    return slice_gradients();
  }

  /// This rank's reduced slice of the gradients (after phase 1, until step or skip).
  [[nodiscard]] std::span<float> slice_gradients() {
    VERL_CHECK_ARG(reduced_, "slice_gradients: call reduce_scatter_gradients first");
    return std::span<float>(flat_).first(static_cast<std::size_t>(owned()));
  }

  /// Phase 2 (collective over `dp`): AdamW with `config` on this rank's slice of the tensors'
  /// values, from the slice's gradients, then every rank's slice all-gathered into `params`.
  template <ReduceScattersInPlace C>
    requires GathersInPlace<C>
  void step(C& dp, std::span<const optim::ParameterRef> params, const optim::AdamWConfig& config) {
    check_group(dp);
    check_params(params);
    VERL_CHECK_ARG(reduced_, "step: call reduce_scatter_gradients first");
    prepare_state();
    ++state_.step;
    const auto scalars = optim::detail::adamw_step_scalars(config, state_.step);
    const float* grads = flat_.data();
    for (const Segment& s : segments_) {
      float* value = params[s.tensor].value.data() + s.begin;
      const auto at = static_cast<std::size_t>(s.slice_offset);
      optim::detail::adamw_update(scalars, value, grads + at, state_.exp_avg.data() + at, state_.exp_avg_sq.data() + at,
                                  static_cast<std::size_t>(s.length));
    }
    // The updated slice into this rank's block of the buffer (the gradients there are spent),
    // the other blocks from their ranks.
    const auto block = static_cast<std::size_t>(rank_ * slice_size_);
    for (const Segment& s : segments_) {
      const std::span<const float> value = params[s.tensor].value.subspan(static_cast<std::size_t>(s.begin),
                                                                           static_cast<std::size_t>(s.length));
      std::copy(value.begin(), value.end(), flat_.begin() + static_cast<std::ptrdiff_t>(block + s.slice_offset));
    }
    const std::vector<std::int64_t> counts(static_cast<std::size_t>(world_size_), slice_size_);
    dp.all_gather_v_in_place(std::span<float>(flat_), std::span<const std::int64_t>(counts));
    for (std::size_t k = 0; k < params.size(); ++k) {
      const auto begin = flat_.begin() + offsets_[k];
      std::copy(begin, begin + tensor_sizes_[k], params[k].value.begin());
    }
    release();
  }

  /// No update this step (a non-finite gradient norm): the moments and the step count stay.
  void skip() { release(); }

  /// Collective over `dp`: every rank's moments in the full layout (one vector per tensor, as
  /// optim::AdamW::State holds them); no moments before the first step (as optim::AdamW).
  template <Communicator C>
    requires GathersInPlace<C>
  [[nodiscard]] optim::AdamW::State gather_moments(C& dp) const {
    check_group(dp);
    optim::AdamW::State full;
    full.step = state_.step;
    // Every rank of the group steps and loads together, so all agree on whether moments exist.
    if (!has_moments_) return full;
    const std::vector<std::int64_t> counts(static_cast<std::size_t>(world_size_), slice_size_);
    for (const auto& [slice, whole] : {std::pair{&state_.exp_avg, &full.exp_avg}, std::pair{&state_.exp_avg_sq, &full.exp_avg_sq}}) {
      std::vector<float> buffer(static_cast<std::size_t>(slice_size_ * world_size_), 0.0f);
      std::copy(slice->begin(), slice->end(), buffer.begin() + rank_ * slice_size_);
      dp.all_gather_v_in_place(std::span<float>(buffer), std::span<const std::int64_t>(counts));
      for (std::size_t k = 0; k < tensor_sizes_.size(); ++k)
        whole->emplace_back(buffer.begin() + offsets_[k], buffer.begin() + offsets_[k] + tensor_sizes_[k]);
    }
    return full;
  }

  /// Keeps this rank's slice of full-layout moments (gather_moments' layout; empty moments: the
  /// state starts over at `full.step`, as optim::AdamW::load_state).
  void load_moments(const optim::AdamW::State& full) {
    State state;
    state.step = full.step;
    VERL_CHECK_ARG(full.step >= 0, "state.step: expected a step count >= 0, got {}", full.step);
    if (!full.exp_avg.empty() || !full.exp_avg_sq.empty()) {
      for (const auto& [what, moments] : {std::pair<std::string_view, const std::vector<std::vector<float>>*>{"exp_avg", &full.exp_avg},
                                          {"exp_avg_sq", &full.exp_avg_sq}}) {
        VERL_CHECK_ARG(moments->size() == tensor_sizes_.size(), "state.{}: expected one vector per tensor ({}), got {}",
                       what, tensor_sizes_.size(), moments->size());
        for (std::size_t k = 0; k < tensor_sizes_.size(); ++k)
          VERL_CHECK_ARG(static_cast<std::int64_t>((*moments)[k].size()) == tensor_sizes_[k],
                         "state.{}[{}]: expected {} elements (the tensor's), got {}", what, k, tensor_sizes_[k],
                         (*moments)[k].size());
      }
      state.exp_avg.resize(static_cast<std::size_t>(owned()));
      state.exp_avg_sq.resize(static_cast<std::size_t>(owned()));
      for (const Segment& s : segments_) {
        const auto from = static_cast<std::ptrdiff_t>(s.begin), to = static_cast<std::ptrdiff_t>(s.slice_offset);
        std::copy_n(full.exp_avg[s.tensor].begin() + from, s.length, state.exp_avg.begin() + to);
        std::copy_n(full.exp_avg_sq[s.tensor].begin() + from, s.length, state.exp_avg_sq.begin() + to);
      }
      has_moments_ = true;
    } else {
      has_moments_ = false;
    }
    state_ = std::move(state);
  }

 private:
  template <class C>
  void check_group(const C& dp) const {
    VERL_CHECK_ARG(dp.size() == world_size_ && dp.rank() == rank_,
                   "dp: expected a communicator of {} ranks at rank {}, got {} ranks at rank {}", world_size_, rank_,
                   dp.size(), dp.rank());
  }

  void check_params(std::span<const optim::ParameterRef> params) const {
    VERL_CHECK_ARG(params.size() == tensor_sizes_.size(), "parameters: expected the {} tensors the optimizer was built for, got {}",
                   tensor_sizes_.size(), params.size());
    for (std::size_t k = 0; k < params.size(); ++k) {
      optim::detail::require_matching_grad(params[k], k);
      VERL_CHECK_ARG(static_cast<std::int64_t>(params[k].value.size()) == tensor_sizes_[k],
                     "parameters[{}] ('{}'): expected {} elements (the optimizer's layout), got {}", k, params[k].name,
                     tensor_sizes_[k], params[k].value.size());
    }
  }

  /// Zero moments at the first step (as optim::AdamW); a restored step count without moments is
  /// refused (optim::AdamW refuses it at its step too).
  void prepare_state() {
    if (has_moments_) return;
    VERL_CHECK_ARG(state_.step == 0,
                   "state: the optimizer was restored at step {} without its moments (exp_avg, exp_avg_sq); expected "
                   "moments for the {} parameters",
                   state_.step, numel_);
    state_.exp_avg.assign(static_cast<std::size_t>(owned()), 0.0f);
    state_.exp_avg_sq.assign(static_cast<std::size_t>(owned()), 0.0f);
    has_moments_ = true;
  }

  void release() {
    reduced_ = false;
    std::vector<float>().swap(flat_);
  }

  std::vector<std::int64_t> tensor_sizes_, offsets_;
  std::int64_t rank_;
  int world_size_;
  std::int64_t numel_ = 0, slice_size_ = 0;
  std::vector<Segment> segments_;
  State state_;
  bool has_moments_ = false;  ///< the moments exist (possibly empty: a rank owning no elements)
  bool reduced_ = false;
  std::vector<float> flat_;   ///< the padded flat gradients, then parameters, of one step
};

}  // namespace verl::parallel
