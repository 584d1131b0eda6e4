// state_dict() / load_state_dict() for any model that visits its parameters by name.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>
#include <string_view>

#include "verl/core/error.hpp"
#include "verl/core/finite.hpp"
#include "verl/model/causal_lm.hpp"

namespace verl::model::detail {

inline std::string shape_string(std::span<const std::int64_t> shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

template <class Model>
StateDict make_state_dict(const Model& model) {
  StateDict dict;
  model.for_each_parameter([&](const auto& p) {
    StateTensor& tensor = dict[std::string(p.name)];
    tensor.shape.assign(p.shape.begin(), p.shape.end());
    tensor.values.resize(p.value.size());
    std::transform(p.value.begin(), p.value.end(), tensor.values.begin(), [](auto v) { return static_cast<float>(v); });
  });
  return dict;
}

/// Strict load: each parameter must be in `dict` with its shape; entries that are not parameters
/// are errors, except `ignored` (e.g. lm_head.weight of a tied model).
template <class Model>
void load_state_dict(Model& model, const StateDict& dict, std::string_view ignored = {}) {
  std::set<std::string_view> used;
  model.for_each_parameter([&](const auto& p) {
    const auto found = dict.find(p.name);
    VERL_CHECK_ARG(found != dict.end(), "state_dict: missing tensor '{}' (shape {})", p.name, shape_string(p.shape));
    const StateTensor& tensor = found->second;
    VERL_CHECK_ARG(std::ranges::equal(tensor.shape, p.shape), "state_dict: tensor '{}': expected shape {}, got {}",
                   p.name, shape_string(p.shape), shape_string(tensor.shape));
    VERL_CHECK_ARG(tensor.values.size() == p.value.size(),
                   "state_dict: tensor '{}': expected {} values for shape {}, got {}", p.name, p.value.size(),
                   shape_string(p.shape), tensor.values.size());
    // A damaged checkpoint (a run that saved NaN or inf weights) is never loaded quietly.
    const auto bad = first_non_finite(std::span<const float>(tensor.values));
    VERL_CHECK_ARG(!bad, "state_dict: tensor '{}': expected finite weights, got {} at index {}", p.name,
                   tensor.values[*bad], *bad);
    using Scalar = std::remove_cvref_t<decltype(p.value[0])>;
    std::transform(tensor.values.begin(), tensor.values.end(), p.value.begin(),
                   [](float v) { return static_cast<Scalar>(v); });
    used.insert(found->first);
  });
  for (const auto& [name, tensor] : dict) {
    VERL_CHECK_ARG(used.contains(name) || name == ignored, "state_dict: unexpected tensor '{}' (shape {})", name,
                   shape_string(tensor.shape));
  }
}

}  // namespace verl::model::detail
