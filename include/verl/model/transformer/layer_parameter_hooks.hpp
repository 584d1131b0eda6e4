// A hook through which a DecoderBody lets its owner hold a decoder layer's full parameters only
// while that layer computes: FSDP's units, one per decoder layer (verl wraps
// transformers' decoder layer class with its auto-wrap policy). The body calls the hook around
// each layer in forward and in backward; the owner gathers the layer's tensors before and frees
// them (and, after backward, hands their gradients on) after. The body stays free of any
// communicator type: trainer/workers/fsdp_sharding.hpp implements this over a ProcessGroup.
#pragma once

#include <cstddef>

namespace verl::model {

class LayerParameterHooks {
 public:
  virtual ~LayerParameterHooks() = default;

  /// Layer `layer` (the body's index) is about to run forward: its tensors must hold their values.
  virtual void before_forward(std::size_t layer) = 0;
  /// Its forward is done (its saved activations hold no reference to its parameters).
  virtual void after_forward(std::size_t layer) = 0;
  /// It is about to run backward: its values and (zeroed or accumulating) gradients must be there.
  virtual void before_backward(std::size_t layer) = 0;
  /// Its backward is done: its gradients hold this pass's contribution.
  virtual void after_backward(std::size_t layer) = 0;
};

}  // namespace verl::model
