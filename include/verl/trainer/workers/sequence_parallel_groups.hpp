// Ulysses sequence parallelism in the fsdp workers (verl's ulysses_sequence_parallel_size, the
// actor's and the critic's): a worker group of `world` ranks is (dp = world / sp, sp), sp fastest,
// so ranks [d * sp, (d + 1) * sp) form data-parallel rank d's sequence-parallel group, as verl's
// (dp, sp) device mesh does. The ranks of an sp group compute on the same rows, dp rank d's: as in
// verl (DP_COMPUTE_PROTO over every rank, then its Ulysses sharding manager's all-gather within the
// sp group), each rank is handed 1/world of the rows and the sp group all-gathers its chunks,
// which together are dp rank d's (an update's re-interleaved per mini-batch, as
// mini_batch_major_order over dp would have ordered them); each rank returns its own chunk's rows
// of a result. The model splits each micro-batch's tokens over the sp group
// (model::UlyssesRegions); its gradients are then summed over the sp group before the dp average.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/wire.hpp"
#include "verl/model/transformer/sequence_parallel_regions.hpp"
#include "verl/model/transformer/ulysses_regions.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/parallel/process_group.hpp"
#include "verl/trainer/workers/batch_keys.hpp"

namespace verl::trainer {

class SequenceParallelGroups {
 public:
  /// Checks `sp` (the value of `key`) against `group` (the worker group, `world` ranks) and, for
  /// sp > 1, splits the group into its sp groups and dp groups. Collective over the group.
  void split(parallel::ProcessGroup* group, Index world, std::int64_t sp, std::string_view key) {
    VERL_CHECK_ARG(sp >= 1 && world % sp == 0,
                   "{}: expected a divisor of the worker group's world size {} (dp = world / sp), got {}", key, world, sp);
    group_ = group;
    world_ = world;
    size_ = static_cast<Index>(sp);
    if (sp == 1) return;
    const int rank = group->rank(), size = static_cast<int>(sp);
    sp_group_.emplace(group->split(rank / size, rank % size));
    dp_group_.emplace(group->split(rank % size, rank / size));
    regions_ = std::make_unique<model::UlyssesRegions<float, parallel::ProcessGroup>>(*sp_group_);
  }

  [[nodiscard]] bool active() const { return size_ > 1; }
  /// The data-parallel ranks: the group's over sp.
  [[nodiscard]] Index dp_size() const { return world_ / size_; }
  /// The ranks holding other rows (this rank's dp group): the whole group without sp.
  [[nodiscard]] parallel::ProcessGroup& dp_group() const { return dp_group_ ? *dp_group_ : *group_; }

  /// Makes `model` split its tokens over the sp group (sp > 1); its heads must split over it as
  /// verl requires: num_attention_heads a multiple of sp, num_key_value_heads a multiple or a
  /// divisor of it (the KV heads are then repeated). `key` names sp in errors.
  template <class Model>
  void use(Model& model, std::string_view key) {
    if (!active()) return;
    if constexpr (requires(model::SequenceParallelRegions<float>* r) { model.set_sequence_parallel(r); }) {
      if constexpr (requires { model.config().num_key_value_heads; }) {
        const auto& c = model.config();
        VERL_CHECK_ARG(c.num_attention_heads % size_ == 0, "{}: {}: the model's num_attention_heads {} must be a multiple of it",
                       key, size_, c.num_attention_heads);
        VERL_CHECK_ARG(c.num_key_value_heads % size_ == 0 || size_ % c.num_key_value_heads == 0,
                       "{}: {}: the model's num_key_value_heads {} must be a multiple or a divisor of it (verl repeats "
                       "the KV heads only when sp is a multiple of them)",
                       key, size_, c.num_key_value_heads);
      }
      model.set_sequence_parallel(regions_.get());
    } else {
      ::verl::detail::throw_invalid_argument(
          "{}: {}: this worker's model type cannot split its tokens (it has no set_sequence_parallel); expected 1", key,
          size_);
    }
  }

  /// This rank's dp rank's rows: the sp group's chunks in rank order (the chunk itself without sp).
  data::DataProto rows(const data::DataProto& chunk) {
    if (!active()) return chunk;
    const std::vector<data::DataProto> parts = gather(chunk);
    own_rows_begin_ = 0;
    for (int r = 0; r < sp_group_->rank(); ++r) own_rows_begin_ += parts[static_cast<std::size_t>(r)].size();
    data::DataProto joined = data::DataProto::concat(parts);
    joined.meta_info() = chunk.meta_info();
    return joined;
  }

  /// An update's rows of this rank's dp rank: each chunk holds its share of every mini-batch of
  /// `mini_batch_rows` rows (mini_batch_major_order over the group's ranks); the dp rank's share of
  /// mini-batch m is the sp group's shares of m in rank order, so they are interleaved.
  data::DataProto update_rows(const data::DataProto& chunk, Index mini_batch_rows) {
    if (!active()) return chunk;
    const std::vector<data::DataProto> parts = gather(chunk);
    std::vector<std::vector<std::pair<Index, Index>>> bounds;
    for (const auto& part : parts) bounds.push_back(local_mini_batch_bounds(part.size(), mini_batch_rows, world_));
    std::vector<data::DataProto> pieces;
    for (std::size_t m = 0; m < bounds.front().size(); ++m)
      for (std::size_t r = 0; r < parts.size(); ++r) pieces.push_back(parts[r].slice(bounds[r][m].first, bounds[r][m].second));
    data::DataProto joined = data::DataProto::concat(pieces);
    joined.meta_info() = chunk.meta_info();
    return joined;
  }

  /// The rows of `result` (over the rows that rows() gathered last) that this rank's chunk of
  /// `chunk_rows` rows gave.
  [[nodiscard]] data::DataProto own_rows(const data::DataProto& result, Index chunk_rows) const {
    if (!active()) return result;
    return result.slice(own_rows_begin_, own_rows_begin_ + chunk_rows);
  }

  /// Each sp rank's gradients are its tokens' share of its dp rank's: their sum is the whole.
  void sum_gradients(std::vector<optim::ParameterRef>& refs) {
    if (!active()) return;
    for (auto& p : refs) sp_group_->all_reduce(p.grad, parallel::ReduceOp::sum);
  }

 private:
  /// Every chunk of the sp group, in rank order (they cross as the runtime's wire bytes, in int64
  /// words: the communicators move typed elements).
  std::vector<data::DataProto> gather(const data::DataProto& chunk) {
    parallel::ProcessGroup& group = *sp_group_;
    const hybridflow::Bytes bytes = hybridflow::to_bytes(chunk);
    const auto words = static_cast<std::int64_t>((bytes.size() + 7) / 8);
    std::vector<std::int64_t> mine(static_cast<std::size_t>(words), 0);
    std::memcpy(mine.data(), bytes.data(), bytes.size());
    const std::vector<std::int64_t> sizes_mine{words, static_cast<std::int64_t>(bytes.size())};
    std::vector<std::int64_t> sizes(2 * static_cast<std::size_t>(group.size()));
    group.all_gather(std::span<const std::int64_t>(sizes_mine), std::span<std::int64_t>(sizes));
    std::vector<std::int64_t> counts(static_cast<std::size_t>(group.size()));
    for (std::size_t r = 0; r < counts.size(); ++r) counts[r] = sizes[2 * r];
    std::vector<std::int64_t> all(static_cast<std::size_t>(std::accumulate(counts.begin(), counts.end(), std::int64_t{0})));
    group.all_gather_v(std::span<const std::int64_t>(mine), std::span<std::int64_t>(all), counts);
    std::vector<data::DataProto> parts;
    std::size_t offset = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      const auto* first = reinterpret_cast<const std::byte*>(all.data() + offset);
      parts.push_back(hybridflow::from_bytes<data::DataProto>(
          std::span<const std::byte>(first, static_cast<std::size_t>(sizes[2 * r + 1]))));
      offset += static_cast<std::size_t>(counts[r]);
    }
    return parts;
  }

  parallel::ProcessGroup* group_ = nullptr;
  Index world_ = 1;
  Index size_ = 1;
  std::optional<parallel::ProcessGroup> sp_group_;  ///< sp > 1 only
  mutable std::optional<parallel::ProcessGroup> dp_group_;  ///< sp > 1 only
  std::unique_ptr<model::SequenceParallelRegions<float>> regions_;
  Index own_rows_begin_ = 0;  ///< this rank's chunk in the rows that rows() gathered last
};

}  // namespace verl::trainer
