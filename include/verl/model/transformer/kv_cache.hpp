// The key/value cache of incremental decoding: per layer and per sequence, the rotated keys and
// the values of every token seen so far. Values are rows, (capacity, kv_heads * head_dim); keys
// are stored transposed, (kv_heads * head_dim, capacity): a decode step's scores q k^T read each
// head's keys as rows of consecutive tokens in place (16 at a time), where rows of keys had to be
// transposed into panels for every query head at every step. One allocation of
// exactly sum(capacities) * layers * 2 * kv_heads * head_dim scalars: what the shapes require
// (bytes()). It may also carry the model's weights packed for decoding (packed_weight_bytes()).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/model/transformer/detail/packed_weights.hpp"

namespace verl::model {

template <class Scalar>
class KvCache {
 public:
  KvCache() = default;
  /// `width` = kv_heads * head_dim; one sequence per capacity.
  KvCache(Index layers, Index width, std::span<const Index> capacities)
      : layers_(layers), width_(width), lengths_(capacities.size(), 0), capacities_(capacities.begin(), capacities.end()) {
    VERL_CHECK_ARG(layers > 0 && width > 0, "KvCache: expected layers > 0 and width > 0, got {} and {}", layers, width);
    offsets_.reserve(capacities.size() + 1);
    offsets_.push_back(0);
    for (std::size_t s = 0; s < capacities.size(); ++s) {
      VERL_CHECK_ARG(capacities[s] >= 0, "capacities: expected values >= 0, got {} for sequence {}", capacities[s], s);
      offsets_.push_back(offsets_.back() + capacities[s]);
    }
    storage_.assign(static_cast<std::size_t>(layers_ * 2 * offsets_.back() * width_), Scalar(0));
  }

  [[nodiscard]] Index num_sequences() const { return static_cast<Index>(lengths_.size()); }
  [[nodiscard]] Index num_layers() const { return layers_; }
  [[nodiscard]] Index width() const { return width_; }
  [[nodiscard]] Index length(Index sequence) const { return lengths_[checked(sequence)]; }
  [[nodiscard]] Index capacity(Index sequence) const { return capacities_[checked(sequence)]; }
  /// Bytes held: the cache's whole memory footprint.
  [[nodiscard]] std::size_t bytes() const { return storage_.size() * sizeof(Scalar); }

  /// A sequence's keys in a layer, transposed: key j of token t at keys_transposed(...)[j *
  /// capacity(sequence) + t].
  [[nodiscard]] Scalar* keys_transposed(Index layer, Index sequence) { return row0(layer, 0, sequence); }
  [[nodiscard]] const Scalar* keys_transposed(Index layer, Index sequence) const { return row0(layer, 0, sequence); }
  /// Row 0 of a sequence's values in a layer; rows are `width()` apart.
  [[nodiscard]] Scalar* values(Index layer, Index sequence) { return row0(layer, 1, sequence); }
  [[nodiscard]] const Scalar* values(Index layer, Index sequence) const { return row0(layer, 1, sequence); }

  /// Writes the keys and values of `count` tokens (rows `width()` apart) after the sequence's
  /// cached ones; advance() records them.
  void write(Index layer, Index sequence, const Scalar* keys, const Scalar* values, Index count) {
    const auto s = checked(sequence);
    const Index at = lengths_[s], capacity = capacities_[s];
    VERL_CHECK_ARG(count >= 0 && at + count <= capacity, "KvCache: sequence {} holds {} of {} tokens, cannot write {}",
                   sequence, at, capacity, count);
    Scalar* const keys_t = keys_transposed(layer, sequence);
    for (Index t = 0; t < count; ++t) {
      for (Index j = 0; j < width_; ++j) keys_t[j * capacity + at + t] = keys[t * width_ + j];
    }
    std::copy_n(values, count * width_, this->values(layer, sequence) + at * width_);
  }

  /// Records that `count` more tokens were written to a sequence.
  void advance(Index sequence, Index count) {
    const auto s = checked(sequence);
    VERL_CHECK_ARG(lengths_[s] + count <= capacities_[s],
                   "KvCache: sequence {} holds {} of {} tokens, cannot add {}", sequence, lengths_[s], capacities_[s],
                   count);
    lengths_[s] += count;
  }
  /// Copies the cached tokens of `from` into `to` (n samples of one prompt share its prefill).
  void copy_sequence(Index from, Index to) {
    const auto f = checked(from), t = checked(to);
    VERL_CHECK_ARG(lengths_[f] <= capacities_[t], "KvCache: sequence {} ({} tokens) does not fit sequence {} ({})",
                   from, lengths_[f], to, capacities_[t]);
    for (Index layer = 0; layer < layers_; ++layer) {
      const Scalar* keys_from = row0(layer, 0, from);
      Scalar* keys_to = row0(layer, 0, to);
      for (Index j = 0; j < width_; ++j) {
        std::copy_n(keys_from + j * capacities_[f], lengths_[f], keys_to + j * capacities_[t]);
      }
      std::copy_n(row0(layer, 1, from), lengths_[f] * width_, row0(layer, 1, to));
    }
    lengths_[t] = lengths_[f];
  }
  void clear(Index sequence) { lengths_[checked(sequence)] = 0; }

  /// The model's weights packed for decoding when the cache was made (float models on AVX2 CPUs):
  /// the cached keys and values belong to those weights anyway. Null when not packed.
  [[nodiscard]] const detail::PackedDecoderWeights* packed_weights() const { return packed_weights_.get(); }
  void set_packed_weights(std::shared_ptr<const detail::PackedDecoderWeights> weights) {
    packed_weights_ = std::move(weights);
  }
  [[nodiscard]] std::size_t packed_weight_bytes() const { return packed_weights_ ? packed_weights_->bytes() : 0; }

 private:
  std::size_t checked(Index sequence) const {
    VERL_CHECK_ARG(sequence >= 0 && sequence < num_sequences(), "sequence: expected an index in [0, {}), got {}",
                   num_sequences(), sequence);
    return static_cast<std::size_t>(sequence);
  }
  // Layout: [layer][keys, values][sequence][capacity x width]: values row-major, keys transposed.
  Scalar* row0(Index layer, int kind, Index sequence) {
    return storage_.data() + ((layer * 2 + kind) * offsets_.back() + offsets_[checked(sequence)]) * width_;
  }
  const Scalar* row0(Index layer, int kind, Index sequence) const {
    return storage_.data() + ((layer * 2 + kind) * offsets_.back() + offsets_[checked(sequence)]) * width_;
  }

  Index layers_ = 0;
  Index width_ = 0;
  std::vector<Index> lengths_;
  std::vector<Index> capacities_;
  std::vector<Index> offsets_;
  std::vector<Scalar> storage_;
  std::shared_ptr<const detail::PackedDecoderWeights> packed_weights_;
};

}  // namespace verl::model
