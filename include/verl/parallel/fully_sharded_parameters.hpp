// FSDP's flat parameter with FULL_SHARD / HYBRID_SHARD (ZeRO-3) over an FSDP group of f ranks:
// a model's tensors laid end to end in one flat index space (in the order the caller passes them,
// every call the same) of `numel` elements, padded to a multiple of f and cut into f equal
// shards; rank r of the group keeps, at rest, shard r of the values, of the gradient and of
// AdamW's two moments, and nothing else. The full tensors live in the caller's model only while a
// forward/backward needs them:
//
//   gather_into(fsdp, params)                 every tensor's values from the shards (one
//                                             all_gather_v per tensor, received straight into
//                                             the tensor: no staging copy of the model)
//   reduce_scatter_gradients(fsdp, params)    the full gradients summed over the group, this
//                                             rank's shard kept (bucketed reduce-scatters), or
//                                             added to it (FSDP's accumulation over micro-batches)
//   all_reduce_gradients(replicate)           HYBRID_SHARD: the shard summed over the replicas
//   scale_gradients(s) / clip_gradients(...)  the mean, then torch's clip_grad_norm_ from the
//                                             shards (per-tensor squared sums over the group)
//   adamw_step(config)                        optim::AdamW's element kernel on the shard
//
// The same numbers as all-reducing the full gradients and stepping optim::AdamW on every rank:
// the same element arithmetic; only MPI's order of summing more than two ranks may differ.
// Padding: shard_size * f - numel < f elements, zero, at the end of the last shards.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/clip_grad_norm.hpp"
#include "verl/optim/parameter.hpp"
#include "verl/parallel/communicator.hpp"

namespace verl::parallel {

class FullyShardedParameters {
 public:
  /// What this rank holds at rest, in bytes of the buffers allocated (not a formula).
  struct HeldBytes {
    std::int64_t parameters = 0, gradients = 0, optimizer = 0;
  };

  /// `tensor_sizes`: the element counts of the tensors, in the order every call passes them;
  /// this rank is `rank` of an FSDP group of `group_size`.
  FullyShardedParameters(std::vector<std::int64_t> tensor_sizes, int rank, int group_size)
      : tensor_sizes_(std::move(tensor_sizes)), rank_(rank), group_size_(group_size) {
    VERL_CHECK_ARG(group_size > 0 && rank >= 0 && rank < group_size, "rank: expected a rank in [0, {}), got {}",
                   group_size, rank);
    std::int64_t offset = 0;
    for (std::size_t k = 0; k < tensor_sizes_.size(); ++k) {
      VERL_CHECK_ARG(tensor_sizes_[k] >= 0, "tensor_sizes[{}]: expected a non-negative count, got {}", k, tensor_sizes_[k]);
      offsets_.push_back(offset);
      offset += tensor_sizes_[k];
    }
    numel_ = offset;
    shard_size_ = (numel_ + group_size - 1) / group_size;
    values_.assign(static_cast<std::size_t>(shard_size_), 0.0f);
  }

  [[nodiscard]] std::int64_t numel() const noexcept { return numel_; }
  /// Elements each rank holds (the padding included).
  [[nodiscard]] std::int64_t shard_size() const noexcept { return shard_size_; }
  [[nodiscard]] std::int64_t padding() const noexcept { return shard_size_ * group_size_ - numel_; }
  [[nodiscard]] std::int64_t optimizer_step_count() const noexcept { return step_; }
  [[nodiscard]] std::span<const float> values() const noexcept { return values_; }
  [[nodiscard]] std::span<const float> gradients() const noexcept { return grads_; }

  [[nodiscard]] HeldBytes held_bytes() const noexcept {
    const auto bytes = [](const std::vector<float>& v) { return static_cast<std::int64_t>(v.size() * sizeof(float)); };
    return {bytes(values_), bytes(grads_), bytes(exp_avg_) + bytes(exp_avg_sq_)};
  }

  /// Keeps this rank's shard of the full tensors `params` (their values).
  void shard_from(std::span<const optim::ParameterRef> params) {
    check_params(params, false);
    std::fill(values_.begin(), values_.end(), 0.0f);
    for_each_piece(rank_, [&](std::size_t k, std::int64_t begin, std::int64_t length, std::int64_t shard_offset) {
      std::copy_n(params[k].value.begin() + begin, length, values_.begin() + shard_offset);
    });
  }

  /// Collective over `fsdp`: every tensor's full values from the group's shards.
  template <Communicator C>
  void gather_into(C& fsdp, std::span<const optim::ParameterRef> params) const {
    check_group(fsdp);
    check_params(params, false);
    gather_buffer_into(fsdp, values_, params);
  }

  /// Collective over `fsdp`: the sum over the group of every rank's full gradients (`params`'
  /// grads), this rank's shard kept, or with `accumulate` added to the shard the previous calls
  /// left (zero before the first). Buckets of at most `bucket` elements per rank bound the
  /// staging buffer (bucket x group size elements).
  template <Communicator C>
  void reduce_scatter_gradients(C& fsdp, std::span<const optim::ParameterRef> params, bool accumulate = false,
                                std::int64_t bucket = std::int64_t{1} << 20) {
    check_group(fsdp);
    check_params(params, true);
    VERL_CHECK_ARG(bucket > 0, "bucket: expected a positive element count, got {}", bucket);
    const bool add = accumulate && grads_.size() == values_.size();
    if (!add) grads_.assign(static_cast<std::size_t>(shard_size_), 0.0f);
    std::vector<float> staging, reduced;
    for (std::int64_t begin = 0; begin < shard_size_; begin += bucket) {
      const std::int64_t length = std::min(bucket, shard_size_ - begin);
      staging.assign(static_cast<std::size_t>(length * group_size_), 0.0f);  // the padding stays 0
      for (int r = 0; r < group_size_; ++r)
        copy_flat_gradients(params, r * shard_size_ + begin, length, staging.data() + r * length);
      const auto target = std::span<float>(grads_).subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(length));
      if (!add) {
        fsdp.reduce_scatter(std::span<const float>(staging), target, ReduceOp::sum);
        continue;
      }
      reduced.resize(static_cast<std::size_t>(length));
      fsdp.reduce_scatter(std::span<const float>(staging), std::span<float>(reduced), ReduceOp::sum);
      for (std::size_t i = 0; i < target.size(); ++i) target[i] += reduced[i];
    }
  }

  /// Zeroes the gradient shard (the next accumulation starts over; the buffer stays).
  void clear_gradients() { grads_.assign(static_cast<std::size_t>(shard_size_), 0.0f); }

  /// Collective over `replicate` (HYBRID_SHARD's ranks holding the same shard): sums the shards.
  template <Communicator C>
  void all_reduce_gradients(C& replicate) {
    replicate.all_reduce(std::span<float>(grads_), ReduceOp::sum);
  }

  void scale_gradients(float scale) {
    for (float& g : grads_) g *= scale;
  }

  /// Collective over `fsdp`: torch's clip_grad_norm_ (norm_type 2) over the full gradient from
  /// the shards: each tensor's squared sum (double) summed over the group, rounded to its float
  /// norm, the norms combined as optim::total_grad_norm does; the shard scaled. Returns the norm.
  template <Communicator C>
  float clip_gradients(C& fsdp, double max_norm) {
    check_group(fsdp);
    VERL_CHECK_ARG(max_norm >= 0.0 && !std::isnan(max_norm), "max_norm: expected a value >= 0, got {}", max_norm);
    std::vector<double> squares = local_gradient_squares();
    fsdp.all_reduce(std::span<double>(squares), ReduceOp::sum);
    double sum = 0.0;
    for (const double s : squares) {
      const double norm = static_cast<float>(std::sqrt(s));  // torch's float32 per-tensor norm
      sum += norm * norm;
    }
    const float total_norm = static_cast<float>(std::sqrt(sum));
    if (tensor_sizes_.empty()) return total_norm;
    const float coefficient = optim::detail::clip_coefficient(total_norm, max_norm);
    if (coefficient != 1.0f) scale_gradients(coefficient);
    return total_norm;
  }

  /// Each tensor's squared gradient sum (double) over this rank's pieces of it: summed over the
  /// group, the squares of torch's per-tensor norms (several flat parameters' norms combine into
  /// one clip_grad_norm_ this way).
  [[nodiscard]] std::vector<double> local_gradient_squares() const {
    std::vector<double> squares(tensor_sizes_.size(), 0.0);
    if (grads_.size() != values_.size()) return squares;
    for_each_piece(rank_, [&](std::size_t k, std::int64_t, std::int64_t length, std::int64_t shard_offset) {
      double sum = 0.0;
      for (std::int64_t i = 0; i < length; ++i) {
        const double g = grads_[static_cast<std::size_t>(shard_offset + i)];
        sum += g * g;
      }
      squares[k] += sum;
    });
    return squares;
  }

  /// AdamW (torch's, optim::AdamW's element kernel) on this rank's shard; moments start at zero.
  void adamw_step(const optim::AdamWConfig& config) {
    VERL_CHECK_ARG(grads_.size() == values_.size(), "adamw_step: no gradient shard (call reduce_scatter_gradients first)");
    if (exp_avg_.empty()) {
      VERL_CHECK_ARG(step_ == 0,
                     "state: the optimizer was restored at step {} without its moments (exp_avg, exp_avg_sq); expected "
                     "moments for the {} parameters",
                     step_, numel_);
      exp_avg_.assign(values_.size(), 0.0f);
      exp_avg_sq_.assign(values_.size(), 0.0f);
    }
    ++step_;
    const auto scalars = optim::detail::adamw_step_scalars(config, step_);
    const auto owned = static_cast<std::size_t>(owned_elements());  // the padding is not stepped
    optim::detail::adamw_update(scalars, values_.data(), grads_.data(), exp_avg_.data(), exp_avg_sq_.data(), owned);
  }

  /// Collective over `fsdp`: the moments in the full layout (one vector per tensor, as
  /// optim::AdamW::State holds them), on every rank; no moments before the first step.
  template <Communicator C>
  [[nodiscard]] optim::AdamW::State gather_moments(C& fsdp) const {
    check_group(fsdp);
    optim::AdamW::State full;
    full.step = step_;
    if (exp_avg_.empty()) return full;  // every rank of the group steps and loads together
    for (const auto& [shard, whole] : {std::pair{&exp_avg_, &full.exp_avg}, std::pair{&exp_avg_sq_, &full.exp_avg_sq}}) {
      std::vector<float> tensor;
      std::vector<optim::ParameterRef> refs;
      whole->resize(tensor_sizes_.size());
      for (std::size_t k = 0; k < tensor_sizes_.size(); ++k) {
        (*whole)[k].resize(static_cast<std::size_t>(tensor_sizes_[k]));
        refs.push_back({std::span<float>((*whole)[k]), {}, {}});
      }
      gather_buffer_into(fsdp, *shard, refs);
    }
    return full;
  }

  /// Keeps this rank's shard of full-layout moments (gather_moments' layout; no moments: the
  /// state starts over at `full.step`, as optim::AdamW::load_state).
  void load_moments(const optim::AdamW::State& full) {
    VERL_CHECK_ARG(full.step >= 0, "state.step: expected a step count >= 0, got {}", full.step);
    std::vector<float> m, v;
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
      m.assign(values_.size(), 0.0f);
      v.assign(values_.size(), 0.0f);
      for_each_piece(rank_, [&](std::size_t k, std::int64_t begin, std::int64_t length, std::int64_t shard_offset) {
        std::copy_n(full.exp_avg[k].begin() + begin, length, m.begin() + shard_offset);
        std::copy_n(full.exp_avg_sq[k].begin() + begin, length, v.begin() + shard_offset);
      });
    }
    exp_avg_ = std::move(m);
    exp_avg_sq_ = std::move(v);
    step_ = full.step;
  }

 private:
  /// [lo, hi) of the flat index space: tensor k's elements inside rank r's shard.
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> overlap(std::size_t k, int r) const {
    const std::int64_t lo = std::max(offsets_[k], r * shard_size_);
    const std::int64_t hi = std::min(offsets_[k] + tensor_sizes_[k], (r + 1) * shard_size_);
    return {lo, std::max(lo, hi)};
  }

  [[nodiscard]] std::int64_t owned_elements() const {
    return std::clamp<std::int64_t>(numel_ - rank_ * shard_size_, 0, shard_size_);
  }

  /// fn(tensor, begin in the tensor, length, offset in the shard) for every piece of rank r's shard.
  template <class Fn>
  void for_each_piece(int r, Fn&& fn) const {
    for (std::size_t k = 0; k < tensor_sizes_.size(); ++k) {
      const auto [lo, hi] = overlap(k, r);
      if (lo < hi) fn(k, lo - offsets_[k], hi - lo, lo - r * shard_size_);
    }
  }

  template <Communicator C>
  void gather_buffer_into(C& fsdp, const std::vector<float>& shard, std::span<const optim::ParameterRef> params) const {
    std::vector<std::int64_t> counts(static_cast<std::size_t>(group_size_));
    for (std::size_t k = 0; k < params.size(); ++k) {
      std::int64_t mine_at = 0;
      for (int r = 0; r < group_size_; ++r) {
        const auto [lo, hi] = overlap(k, r);
        counts[static_cast<std::size_t>(r)] = hi - lo;
        if (r == rank_ && hi > lo) mine_at = lo - r * shard_size_;
      }
      fsdp.all_gather_v(std::span<const float>(shard).subspan(static_cast<std::size_t>(mine_at),
                                                               static_cast<std::size_t>(counts[static_cast<std::size_t>(rank_)])),
                        params[k].value, std::span<const std::int64_t>(counts));
    }
  }

  /// Flat gradient elements [flat_begin, flat_begin + length) into `out` (0 past numel).
  void copy_flat_gradients(std::span<const optim::ParameterRef> params, std::int64_t flat_begin, std::int64_t length,
                           float* out) const {
    const std::int64_t flat_end = flat_begin + length;
    auto k = static_cast<std::size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), flat_begin) - offsets_.begin());
    k = k == 0 ? 0 : k - 1;
    for (; k < tensor_sizes_.size() && offsets_[k] < flat_end; ++k) {
      const std::int64_t lo = std::max(flat_begin, offsets_[k]), hi = std::min(flat_end, offsets_[k] + tensor_sizes_[k]);
      if (lo < hi) std::copy_n(params[k].grad.begin() + (lo - offsets_[k]), hi - lo, out + (lo - flat_begin));
    }
  }

  template <class C>
  void check_group(const C& fsdp) const {
    VERL_CHECK_ARG(fsdp.size() == group_size_ && fsdp.rank() == rank_,
                   "fsdp: expected a communicator of {} ranks at rank {}, got {} ranks at rank {}", group_size_, rank_,
                   fsdp.size(), fsdp.rank());
  }

  void check_params(std::span<const optim::ParameterRef> params, bool with_grads) const {
    VERL_CHECK_ARG(params.size() == tensor_sizes_.size(),
                   "parameters: expected the {} tensors the flat parameter was built for, got {}", tensor_sizes_.size(),
                   params.size());
    for (std::size_t k = 0; k < params.size(); ++k) {
      VERL_CHECK_ARG(static_cast<std::int64_t>(params[k].value.size()) == tensor_sizes_[k],
                     "parameters[{}] ('{}'): expected {} elements (the flat parameter's layout), got {}", k,
                     params[k].name, tensor_sizes_[k], params[k].value.size());
      if (with_grads) optim::detail::require_matching_grad(params[k], k);
    }
  }

  std::vector<std::int64_t> tensor_sizes_, offsets_;
  std::int64_t rank_;
  int group_size_;
  std::int64_t numel_ = 0, shard_size_ = 0;
  std::vector<float> values_;               ///< shard_size_: this rank's shard, zero padding
  std::vector<float> grads_;                ///< the reduced gradient shard (after the first step)
  std::vector<float> exp_avg_, exp_avg_sq_;  ///< AdamW's moments of the shard (after the first step)
  std::int64_t step_ = 0;
};

}  // namespace verl::parallel
