// A hook on the seven linear layers of each decoder layer (q/k/v/o projections, gate/up/down of the
// MLP): an adapter adds its own term to a linear layer's output, and in backward takes that
// layer's input and output gradient to accumulate its own parameter gradients and add its share
// of the input gradient. LoRA (lora.hpp) is one; DecoderBody calls the adapter it is given, if any.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "verl/core/tensor.hpp"
#include "verl/model/transformer/detail/linear.hpp"

namespace verl::model {

/// The linear layers of a decoder layer, in the order transformers registers them.
enum class LinearModule : std::uint8_t { q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj };

inline constexpr std::array<LinearModule, 7> linear_modules = {
    LinearModule::q_proj,    LinearModule::k_proj,  LinearModule::v_proj,   LinearModule::o_proj,
    LinearModule::gate_proj, LinearModule::up_proj, LinearModule::down_proj};

/// The module's name as in Hugging Face checkpoints ("q_proj", ...).
constexpr std::string_view name_of(LinearModule module) {
  constexpr std::array<std::string_view, 7> names = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                     "gate_proj", "up_proj", "down_proj"};
  return names[static_cast<std::size_t>(module)];
}

/// The module's path in a Hugging Face Llama-family model: "model.layers.3.self_attn.q_proj".
inline std::string module_path(Index layer, LinearModule module) {
  const bool attention = module <= LinearModule::o_proj;
  return fmt::format("model.layers.{}.{}.{}", layer, attention ? "self_attn" : "mlp", name_of(module));
}

/// Adds a term to linear layers' outputs. Virtual, so that DecoderBody stays one type whatever
/// adapter (or none) a model carries; it is called seven times per layer, never per element.
template <class Scalar>
class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  /// y (N, out) += the adapter's term for input x (N, in).
  virtual void forward(Index layer, LinearModule module, const detail::ConstRef<Scalar>& x,
                       detail::MutRef<Scalar> y) = 0;
  /// From the layer's input x (N, in) and the gradient of its output dy (N, out): accumulates the
  /// adapter's parameter gradients and adds the adapter's part of d(x) to dx (N, in).
  virtual void backward(Index layer, LinearModule module, const detail::ConstRef<Scalar>& x,
                        const detail::ConstRef<Scalar>& dy, detail::MutRef<Scalar> dx) = 0;

 protected:
  LinearAdapter() = default;
  LinearAdapter(const LinearAdapter&) = default;
  LinearAdapter(LinearAdapter&&) noexcept = default;
  LinearAdapter& operator=(const LinearAdapter&) = default;
  LinearAdapter& operator=(LinearAdapter&&) noexcept = default;
};

}  // namespace verl::model
