// KL estimators by verl's names (algorithm.kl_penalty / actor.kl_loss_type strings): a runtime
// estimator, and kl_penalty overloads that take the name as verl does.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <variant>

#include "verl/algo/kl/penalty.hpp"
#include "verl/core/error.hpp"
#include "verl/core/type_list.hpp"

namespace verl::algo {

/// verl's KL types (kl_penalty's names), in its order, then their straight-through variants
/// ("kl+", ... "k3+": the value of the stem, the gradient of k2): the one list of the family. The
/// variant, the names and make_kl_estimator derive from it.
using KLEstimators =
    TypeList<KL, K1, Abs, MSE, K2, LowVarKL, K3, StraightThrough<KL>, StraightThrough<K1>, StraightThrough<Abs>,
             StraightThrough<MSE>, StraightThrough<K2>, StraightThrough<LowVarKL>, StraightThrough<K3>>;

/// One of verl's KL types, chosen at run time. Visit it once per batch, never per element.
using AnyKLEstimator = variant_of_t<KLEstimators>;

/// The names verl's kl_penalty accepts.
inline constexpr auto kl_penalty_names = names_of(KLEstimators{});

namespace detail {

inline bool make_kl_estimator_named(std::string_view name, AnyKLEstimator& out) {
  return visit_by_name(KLEstimators{}, name, [&](auto type) { out.template emplace<typename decltype(type)::type>(); });
}

}  // namespace detail

/// The estimator verl's kl_penalty uses for `kl_penalty` ("kl", "k1", "abs", "mse", "k2",
/// "low_var_kl", "k3", each also with a trailing '+'). "full", which verl names but does not
/// implement, throws verl::NotImplemented, as verl does; any other name throws
/// verl::InvalidArgument listing the valid names.
inline AnyKLEstimator make_kl_estimator(std::string_view kl_penalty) {
  AnyKLEstimator estimator;
  if (detail::make_kl_estimator_named(kl_penalty, estimator)) return estimator;
  if (kl_penalty == "full")
    verl::detail::throw_not_implemented(
        "kl_penalty: 'full' (KL over the whole vocabulary) is not implemented by verl");
  verl::detail::throw_invalid_argument("kl_penalty: expected one of {}, got '{}'", joined_names_of<KLEstimators>(),
                                       kl_penalty);
}

/// verl's name of a runtime estimator.
inline std::string_view name_of(const AnyKLEstimator& estimator) {
  return std::visit([](const auto& e) { return std::string_view(std::decay_t<decltype(e)>::name); }, estimator);
}

/// verl's kl_penalty_forward, which knows the stems only: a straight-through name ("k3+") throws
/// verl::NotImplemented, as verl raises NotImplementedError (kl_penalty takes those names).
template <class LD, class RD>
RowMatrix<typename LD::Scalar> kl_penalty_forward(const Eigen::MatrixBase<LD>& logprob,
                                                  const Eigen::MatrixBase<RD>& ref_logprob,
                                                  const AnyKLEstimator& estimator) {
  if (const std::string_view name = name_of(estimator); name.ends_with('+'))
    verl::detail::throw_not_implemented(
        "kl_penalty_forward: '{}' is a straight-through name, which verl's kl_penalty takes and its "
        "kl_penalty_forward does not",
        name);
  return std::visit([&](const auto& e) { return kl_penalty_forward(logprob, ref_logprob, e); }, estimator);
}

template <class LD, class RD>
RowMatrix<typename LD::Scalar> kl_penalty(const Eigen::MatrixBase<LD>& logprob,
                                          const Eigen::MatrixBase<RD>& ref_logprob, const AnyKLEstimator& estimator) {
  return std::visit([&](const auto& e) { return kl_penalty(logprob, ref_logprob, e); }, estimator);
}

template <class LD, class RD>
void kl_penalty_into(RowMatrix<typename LD::Scalar>& out, const Eigen::MatrixBase<LD>& logprob,
                     const Eigen::MatrixBase<RD>& ref_logprob, const AnyKLEstimator& estimator) {
  std::visit([&](const auto& e) { kl_penalty_into(out, logprob, ref_logprob, e); }, estimator);
}

template <class LD, class RD, class CD>
KLPenaltyGrad<typename LD::Scalar> kl_penalty_backward(const Eigen::MatrixBase<LD>& logprob,
                                                       const Eigen::MatrixBase<RD>& ref_logprob,
                                                       const Eigen::MatrixBase<CD>& cotangent,
                                                       const AnyKLEstimator& estimator) {
  return std::visit([&](const auto& e) { return kl_penalty_backward(logprob, ref_logprob, cotangent, e); },
                    estimator);
}

/// verl's signature: kl_penalty(logprob, ref_logprob, "low_var_kl").
template <class LD, class RD>
RowMatrix<typename LD::Scalar> kl_penalty(const Eigen::MatrixBase<LD>& logprob,
                                          const Eigen::MatrixBase<RD>& ref_logprob, std::string_view kl_penalty_type) {
  return kl_penalty(logprob, ref_logprob, make_kl_estimator(kl_penalty_type));
}

/// kl_penalty into reused storage, by verl's name: kl_penalty_into(out, logprob, ref, "k3").
template <class LD, class RD>
void kl_penalty_into(RowMatrix<typename LD::Scalar>& out, const Eigen::MatrixBase<LD>& logprob,
                     const Eigen::MatrixBase<RD>& ref_logprob, std::string_view kl_penalty_type) {
  kl_penalty_into(out, logprob, ref_logprob, make_kl_estimator(kl_penalty_type));
}

template <class LD, class RD>
RowMatrix<typename LD::Scalar> kl_penalty_forward(const Eigen::MatrixBase<LD>& logprob,
                                                  const Eigen::MatrixBase<RD>& ref_logprob,
                                                  std::string_view kl_penalty_type) {
  return kl_penalty_forward(logprob, ref_logprob, make_kl_estimator(kl_penalty_type));
}

}  // namespace verl::algo
