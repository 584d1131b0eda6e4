// The parameter interface of a model made of ParameterTensors (the transformer, its critic):
// visiting the parameters, zeroing the gradients and the state dict, from Derived's
// for_each_tensor (const and non-const).
#pragma once

#include "verl/model/transformer/detail/state_dict.hpp"
#include "verl/model/transformer/weights.hpp"

namespace verl::model::detail {

template <class Derived, class Scalar>
class ParameterModule {
 public:
  /// Visits every parameter (Parameter<Scalar>: name, shape, value, gradient). Gradient spans are
  /// empty until the first backward() or zero_grad().
  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    self().for_each_tensor([&](ParameterTensor<Scalar>& t) { fn(t.view()); });
  }
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    self().for_each_tensor([&](const ParameterTensor<Scalar>& t) { fn(t.view()); });
  }

  void zero_grad() {
    self().for_each_tensor([](ParameterTensor<Scalar>& t) { t.zero_grad(); });
  }

  [[nodiscard]] StateDict state_dict() const { return make_state_dict(self()); }

  /// Frees every parameter's values and gradient (names and shapes stay): a sharded trainer keeps
  /// its shard elsewhere and gives the model full tensors only for the calls that need them.
  void release_parameter_storage() {
    self().for_each_tensor([](ParameterTensor<Scalar>& t) { t.release_storage(); });
  }
  /// Values of every parameter's shape again (contents unspecified until the caller fills them).
  void allocate_parameter_storage() {
    self().for_each_tensor([](ParameterTensor<Scalar>& t) { t.allocate_storage(); });
  }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

}  // namespace verl::model::detail
