// The linear weights of the transformer packed once for decoding (see cpu::PackedMatrix in gemm.hpp):
// a KV cache carries them, so a rollout packs its weights once instead of at every decode step.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "verl/core/tensor.hpp"
#include "verl/cpu/gemm.hpp"
#include "verl/model/decode_precision.hpp"

namespace verl::model::detail {

struct PackedLayerWeights {
  cpu::PackedMatrix q, k, v, o, gate, up, down;
};

struct PackedDecoderWeights {
  std::vector<PackedLayerWeights> layers;
  cpu::PackedMatrix head;  ///< the LM head (or the tied embedding)

  [[nodiscard]] std::size_t bytes() const {
    std::size_t total = head.bytes();
    for (const auto& l : layers) {
      total += l.q.bytes() + l.k.bytes() + l.v.bytes() + l.o.bytes() + l.gate.bytes() + l.up.bytes() + l.down.bytes();
    }
    return total;
  }
};

/// W (out, in) packed as the B operand of x W^T into `packed`, reusing its memory.
inline void repack_linear(const RowMatrix<float>& weight, cpu::PackedMatrix& packed, DecodePrecision precision) {
  packed.repack(cpu::transpose_of(weight.data(), weight.cols()), weight.cols(), weight.rows(), precision);
}

/// The packed weights of a model's last KV cache, handed to its next cache once no cache holds
/// them any more: a rollout must repack (training changed the weights), but into memory that is
/// already mapped. Shared by copies of a model (only the memory is reused, never the contents).
class PackedWeightsRecycler {
 public:
  /// Weights to pack into: the spare when nothing else holds it, else new ones (then the spare).
  std::shared_ptr<PackedDecoderWeights> take() {
    const std::lock_guard lock(mutex_);
    if (spare_ == nullptr || spare_.use_count() > 1) spare_ = std::make_shared<PackedDecoderWeights>();
    return spare_;
  }
  void release() {
    const std::lock_guard lock(mutex_);
    spare_.reset();
  }

 private:
  std::mutex mutex_;
  std::shared_ptr<PackedDecoderWeights> spare_;
};

}  // namespace verl::model::detail
