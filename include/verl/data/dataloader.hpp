// The training data order: batches of `batch_size` sample indices per epoch, shuffled by seed
// (a new permutation every epoch) or in order, with verl's drop_last for training. The position
// (epoch, batch within the epoch) is the whole state: saved in a checkpoint it resumes the exact
// sequence of batches, as verl's StatefulDataLoader does.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/data/random_permutation.hpp"

namespace verl::data {

/// verl's default torch.Generator seed, used when data.seed is null so that runs stay
/// reproducible.
inline constexpr std::uint64_t default_data_seed = 67280421310721ULL;

struct DataLoaderOptions {
  std::int64_t batch_size = 1;
  bool shuffle = true;
  std::uint64_t seed = default_data_seed;
  bool drop_last = true;  ///< training drops a last partial batch; validation keeps it
};

/// Where the loader stands: the epoch and the number of batches of it already handed out.
struct DataLoaderState {
  std::int64_t epoch = 0;
  std::int64_t batches_consumed = 0;
  // Recorded to refuse resuming a different setup.
  std::int64_t dataset_size = 0;
  std::int64_t batch_size = 0;
  bool shuffle = true;
  std::uint64_t seed = default_data_seed;
  friend bool operator==(const DataLoaderState&, const DataLoaderState&) = default;
};

inline nlohmann::json to_json(const DataLoaderState& state) {
  return {{"epoch", state.epoch},           {"batches_consumed", state.batches_consumed},
          {"dataset_size", state.dataset_size}, {"batch_size", state.batch_size},
          {"shuffle", state.shuffle},       {"seed", state.seed}};
}

inline DataLoaderState data_loader_state_from_json(const nlohmann::json& json) {
  DataLoaderState state;
  try {
    state.epoch = json.at("epoch").get<std::int64_t>();
    state.batches_consumed = json.at("batches_consumed").get<std::int64_t>();
    state.dataset_size = json.at("dataset_size").get<std::int64_t>();
    state.batch_size = json.at("batch_size").get<std::int64_t>();
    state.shuffle = json.at("shuffle").get<bool>();
    state.seed = json.at("seed").get<std::uint64_t>();
  } catch (const nlohmann::json::exception& error) {
    ::verl::detail::throw_invalid_argument("data loader state: {}", error.what());
  }
  return state;
}

class DataLoader {
 public:
  DataLoader(std::int64_t dataset_size, DataLoaderOptions options) : size_(dataset_size), options_(options) {
    VERL_CHECK_ARG(dataset_size >= 0, "dataset_size: expected a size >= 0, got {}", dataset_size);
    VERL_CHECK_ARG(options.batch_size > 0, "batch_size: expected a positive batch size, got {}", options.batch_size);
  }

  /// Batches per epoch (verl's len(dataloader)).
  [[nodiscard]] std::int64_t num_batches() const {
    return options_.drop_last ? size_ / options_.batch_size : (size_ + options_.batch_size - 1) / options_.batch_size;
  }
  [[nodiscard]] std::int64_t epoch() const { return epoch_; }
  [[nodiscard]] std::int64_t batches_consumed() const { return consumed_; }
  [[nodiscard]] const DataLoaderOptions& options() const { return options_; }
  [[nodiscard]] std::int64_t dataset_size() const { return size_; }

  /// The next batch of sample indices in the current epoch, or nullopt when the epoch is over
  /// (the loader then stands at the start of the next epoch).
  std::optional<std::vector<std::int64_t>> next() {
    if (consumed_ >= num_batches()) {
      ++epoch_;
      consumed_ = 0;
      order_.reset();
      return std::nullopt;
    }
    const auto& order = epoch_order();
    const std::int64_t begin = consumed_ * options_.batch_size;
    const std::int64_t end = std::min(begin + options_.batch_size, size_);
    ++consumed_;
    return std::vector<std::int64_t>(order.begin() + begin, order.begin() + end);
  }

  /// The order of all samples in epoch `epoch`.
  [[nodiscard]] std::vector<std::int64_t> order_of_epoch(std::int64_t epoch) const {
    if (!options_.shuffle) {
      std::vector<std::int64_t> order(static_cast<std::size_t>(size_));
      for (std::int64_t i = 0; i < size_; ++i) order[static_cast<std::size_t>(i)] = i;
      return order;
    }
    auto engine = seeded_engine(options_.seed, static_cast<std::uint64_t>(epoch));
    return random_permutation(size_, engine);
  }

  [[nodiscard]] DataLoaderState state() const {
    return {epoch_, consumed_, size_, options_.batch_size, options_.shuffle, options_.seed};
  }

  /// Resumes from a saved position; the dataset size, batch size, shuffling and seed must be the
  /// ones the state was saved with (anything else would silently change the data order).
  void load_state(const DataLoaderState& state) {
    VERL_CHECK_ARG(state.dataset_size == size_, "data loader state: saved for a dataset of {} samples, this one has {}",
                   state.dataset_size, size_);
    VERL_CHECK_ARG(state.batch_size == options_.batch_size,
                   "data loader state: saved with batch size {}, this loader uses {}", state.batch_size,
                   options_.batch_size);
    VERL_CHECK_ARG(state.shuffle == options_.shuffle && state.seed == options_.seed,
                   "data loader state: saved with shuffle={} seed={}, this loader uses shuffle={} seed={}", state.shuffle,
                   state.seed, options_.shuffle, options_.seed);
    VERL_CHECK_ARG(state.epoch >= 0 && state.batches_consumed >= 0 && state.batches_consumed <= num_batches(),
                   "data loader state: expected epoch >= 0 and 0 <= batches_consumed <= {}, got epoch {} and {}",
                   num_batches(), state.epoch, state.batches_consumed);
    epoch_ = state.epoch;
    consumed_ = state.batches_consumed;
    order_.reset();
  }

 private:
  const std::vector<std::int64_t>& epoch_order() {
    if (!order_) order_ = order_of_epoch(epoch_);
    return *order_;
  }

  std::int64_t size_;
  DataLoaderOptions options_;
  std::int64_t epoch_ = 0;
  std::int64_t consumed_ = 0;
  std::optional<std::vector<std::int64_t>> order_;
};

}  // namespace verl::data
