// The linear weights of the transformer packed once for decoding (see PackedMatrix in gemm.hpp):
// a KV cache carries them, so a rollout packs its weights once instead of at every decode step.
#pragma once

#include <cstddef>
#include <vector>

#include "verl/core/tensor.hpp"
#include "verl/model/transformer/detail/gemm.hpp"

namespace verl::model::detail {

struct PackedLayerWeights {
  PackedMatrix q, k, v, o, gate, up, down;
};

struct PackedDecoderWeights {
  std::vector<PackedLayerWeights> layers;
  PackedMatrix head;  ///< the LM head (or the tied embedding)

  [[nodiscard]] std::size_t bytes() const {
    std::size_t total = head.bytes();
    for (const auto& l : layers) {
      total += l.q.bytes() + l.k.bytes() + l.v.bytes() + l.o.bytes() + l.gate.bytes() + l.up.bytes() + l.down.bytes();
    }
    return total;
  }
};

/// W (out, in) as the B operand of x W^T.
inline PackedMatrix pack_linear(const RowMatrix<float>& weight) {
  return PackedMatrix::pack(transpose_of(weight.data(), weight.cols()), weight.cols(), weight.rows());
}

}  // namespace verl::model::detail
