// The precision of the weights a KV-cache rollout decodes with (verl's
// actor_rollout_ref.rollout.dtype): the model trains in float32, and its rollout may read its
// weights rounded to bfloat16, as verl's inference engines do.
#pragma once

#include <string>
#include <string_view>

#include "verl/core/error.hpp"

namespace verl::cpu {

enum class DecodePrecision {
  float32,   ///< the weights as trained: rollout log-probs equal a forward pass's, bit for bit
  /// linear weights and the rows multiplied with them rounded to nearest-even bfloat16, products
  /// summed in float32 (AMX tiles where the CPU has them): half the bytes per decode step
  bfloat16,
};

/// "float32" / "fp32" / "float" or "bfloat16" / "bf16" (verl's spellings of rollout.dtype).
inline DecodePrecision parse_decode_precision(std::string_view name, std::string_view argument = "dtype") {
  if (name == "float32" || name == "fp32" || name == "float") return DecodePrecision::float32;
  if (name == "bfloat16" || name == "bf16") return DecodePrecision::bfloat16;
  ::verl::detail::throw_invalid_argument("{}: expected 'float32' or 'bfloat16', got '{}'", argument, std::string(name));
}

}  // namespace verl::cpu
