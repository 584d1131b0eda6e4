// Runs one stage's pipeline steps (pipeline_schedule.hpp) over a communicator whose rank i is
// stage i: activations travel forward, gradients backward, with the same pairing of sends and
// receives as the schedule (combined steps use send_recv, so blocking transports cannot deadlock).
// Micro-batches may differ in size (a micro-batch of packed tokens has as many activation rows as
// tokens): every stage is told each micro-batch's message size (the activation and its gradient
// have the same size), and a message of another size is an error naming the micro-batch.
//
// Two ways to drive a stage: run_pipeline_stage calls a PipelineStageModel for each compute step
// of the schedule; PipelineStageRunner lets the caller run the compute steps itself, in the
// schedule's order (the last stage of a trainer computes its loss between them), and moves the
// messages around them.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <map>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/parallel/communicator.hpp"
#include "verl/parallel/pipeline_schedule.hpp"

namespace verl::parallel {

/// A model stage: forward(mb, input) returns the output activation (the first stage gets an
/// empty input and reads its own micro-batch); backward(mb, grad_output) returns the gradient
/// of its input (the last stage gets an empty gradient and starts from its loss). Returned
/// spans must stay valid until the next call.
template <class M>
concept PipelineStageModel = requires(M& m, std::int64_t mb, std::span<const float> in) {
  { m.forward(mb, in) } -> std::convertible_to<std::span<const float>>;
  { m.backward(mb, in) } -> std::convertible_to<std::span<const float>>;
};

/// Forward-only steps (Megatron's forward_only pass, e.g. log-probs): each micro-batch received,
/// computed and sent on, in order.
inline std::vector<PipelineStep> forward_only_steps(std::int64_t stage, std::int64_t stages, std::int64_t microbatches) {
  detail::check_pipeline_shape(stage, stages, microbatches);
  detail::StepWriter w(stage, stages);
  for (std::int64_t mb = 0; mb < microbatches; ++mb) {
    w.recv_forward(mb);
    w.forward(mb);
    w.send_forward(mb);
  }
  return std::move(w.steps);
}

/// One stage's steps, executed as the caller runs the compute steps: begin(action, mb) runs the
/// communication steps before the next compute step, which must be `action` of `mb` (else the
/// caller's order is not the schedule's: an error), and returns its input (the activation
/// received for a forward, the gradient received for a backward; empty on the first stage's
/// forwards and the last stage's backwards); end(result) takes the compute step's result (the
/// output activation of a forward, the input gradient of a backward), to be sent by the next
/// communication steps; finish() runs the steps left and checks that none is.
template <Communicator C>
class PipelineStageRunner {
 public:
  /// `message_sizes[mb]`: the floats of micro-batch mb's activation (and of its gradient).
  PipelineStageRunner(C& pp, std::vector<PipelineStep> steps, std::vector<std::int64_t> message_sizes)
      : pp_(&pp), steps_(std::move(steps)), sizes_(std::move(message_sizes)) {
    for (std::size_t mb = 0; mb < sizes_.size(); ++mb) {
      VERL_CHECK_ARG(sizes_[mb] > 0, "message_sizes: expected positive sizes, got {} for micro-batch {}", sizes_[mb], mb);
    }
  }

  std::span<const float> begin(PipelineAction action, std::int64_t mb) {
    VERL_CHECK_ARG(action == PipelineAction::forward || action == PipelineAction::backward,
                   "begin: expected a compute action (forward or backward), got {}", to_string(action));
    VERL_CHECK_ARG(!computing_, "begin: the previous compute step ({} of micro-batch {}) has not ended", to_string(current_.action),
                   current_.microbatch);
    run_communication();
    VERL_CHECK_ARG(next_ < steps_.size(), "begin: stage {} of {}: the schedule has no step left, the caller runs {} of micro-batch {}",
                   pp_->rank(), pp_->size(), to_string(action), mb);
    const PipelineStep& st = steps_[next_];
    VERL_CHECK_ARG(st.action == action && st.microbatch == mb,
                   "begin: stage {} of {}: the schedule's next compute step is {} of micro-batch {}, the caller runs {} of "
                   "micro-batch {}",
                   pp_->rank(), pp_->size(), to_string(st.action), st.microbatch, to_string(action), mb);
    current_ = st;
    computing_ = true;
    ++next_;
    auto& received = action == PipelineAction::forward ? inputs_ : grad_outputs_;
    const auto found = received.find(mb);
    if (found == received.end()) return {};
    held_ = std::move(found->second);
    received.erase(found);
    return held_;
  }

  void end(std::span<const float> result) {
    VERL_CHECK_ARG(computing_, "end: no compute step has begun");
    computing_ = false;
    const std::int64_t mb = current_.microbatch;
    const bool forward = current_.action == PipelineAction::forward;
    // What the schedule sends on: the last stage's outputs and the first stage's input gradients stay.
    if (forward ? !last() : !first()) keep(forward ? outputs_ : grad_inputs_, mb, result);
    held_.clear();
  }

  void finish() {
    VERL_CHECK_ARG(!computing_, "finish: the compute step {} of micro-batch {} has not ended", to_string(current_.action),
                   current_.microbatch);
    run_communication();
    VERL_CHECK_ARG(next_ == steps_.size(), "finish: stage {} of {}: the schedule's step {} ({} of micro-batch {}) did not run",
                   pp_->rank(), pp_->size(), next_, to_string(steps_[next_].action), steps_[next_].microbatch);
  }

 private:
  bool first() const { return pp_->rank() == 0; }
  bool last() const { return pp_->rank() == pp_->size() - 1; }
  std::size_t size_of(std::int64_t mb) const {
    VERL_CHECK_ARG(mb >= 0 && static_cast<std::size_t>(mb) < sizes_.size(),
                   "steps: micro-batch {} has no message size (expected one of {} micro-batches)", mb, sizes_.size());
    return static_cast<std::size_t>(sizes_[static_cast<std::size_t>(mb)]);
  }
  std::vector<float>& buffer(std::map<std::int64_t, std::vector<float>>& m, std::int64_t mb) {
    auto& b = m[mb];
    b.resize(size_of(mb));
    return b;
  }
  void keep(std::map<std::int64_t, std::vector<float>>& m, std::int64_t mb, std::span<const float> data) {
    VERL_CHECK_ARG(data.size() == size_of(mb), "model: expected {} floats per message of micro-batch {}, got {}", size_of(mb),
                   mb, data.size());
    m[mb].assign(data.begin(), data.end());
  }
  std::vector<float> take(std::map<std::int64_t, std::vector<float>>& m, std::int64_t mb, std::string_view what) {
    const auto found = m.find(mb);
    VERL_CHECK_ARG(found != m.end(), "steps: stage {}: no {} of micro-batch {} to send", pp_->rank(), what, mb);
    std::vector<float> out = std::move(found->second);
    m.erase(found);
    return out;
  }

  /// The communication steps up to the next compute step.
  void run_communication() {
    constexpr int tag = 0;
    const int next = pp_->rank() + 1, prev = pp_->rank() - 1;
    for (; next_ < steps_.size(); ++next_) {
      const PipelineStep& st = steps_[next_];
      switch (st.action) {
        case PipelineAction::forward:
        case PipelineAction::backward: return;
        case PipelineAction::recv_forward: pp_->recv(std::span(buffer(inputs_, st.microbatch)), prev, tag); break;
        case PipelineAction::recv_backward: pp_->recv(std::span(buffer(grad_outputs_, st.microbatch)), next, tag); break;
        case PipelineAction::send_forward: {
          const std::vector<float> out = take(outputs_, st.microbatch, "activation");
          pp_->send(std::span<const float>(out), next, tag);
          break;
        }
        case PipelineAction::send_backward: {
          const std::vector<float> grad = take(grad_inputs_, st.microbatch, "gradient");
          pp_->send(std::span<const float>(grad), prev, tag);
          break;
        }
        case PipelineAction::send_forward_recv_backward: {
          const std::vector<float> out = take(outputs_, st.microbatch, "activation");
          pp_->send_recv(std::span<const float>(out), next, std::span(buffer(grad_outputs_, st.recv_microbatch)), next, tag);
          break;
        }
        case PipelineAction::send_backward_recv_forward: {
          const std::vector<float> grad = take(grad_inputs_, st.microbatch, "gradient");
          pp_->send_recv(std::span<const float>(grad), prev, std::span(buffer(inputs_, st.recv_microbatch)), prev, tag);
          break;
        }
      }
    }
  }

  C* pp_;
  std::vector<PipelineStep> steps_;
  std::vector<std::int64_t> sizes_;
  std::size_t next_ = 0;
  bool computing_ = false;
  PipelineStep current_{PipelineAction::forward};
  std::vector<float> held_;  ///< the current compute step's input
  std::map<std::int64_t, std::vector<float>> inputs_, outputs_, grad_outputs_, grad_inputs_;
};

/// Executes `steps` as stage pp.rank() of pp.size(); micro-batch mb's messages have
/// `message_sizes[mb]` floats.
template <Communicator C, PipelineStageModel M>
void run_pipeline_stage(C& pp, std::span<const PipelineStep> steps, M& model, std::span<const std::int64_t> message_sizes) {
  PipelineStageRunner<C> runner(pp, std::vector<PipelineStep>(steps.begin(), steps.end()),
                                std::vector<std::int64_t>(message_sizes.begin(), message_sizes.end()));
  for (const PipelineStep& st : steps) {
    if (st.action == PipelineAction::forward) {
      const std::span<const float> in = runner.begin(st.action, st.microbatch);
      runner.end(model.forward(st.microbatch, in));
    } else if (st.action == PipelineAction::backward) {
      const std::span<const float> grad = runner.begin(st.action, st.microbatch);
      runner.end(model.backward(st.microbatch, grad));
    }
  }
  runner.finish();
}

/// Executes `steps` with every message of `message_size` floats.
template <Communicator C, PipelineStageModel M>
void run_pipeline_stage(C& pp, std::span<const PipelineStep> steps, M& model, std::int64_t message_size) {
  VERL_CHECK_ARG(message_size > 0, "message_size: expected a positive size, got {}", message_size);
  std::int64_t microbatches = 0;
  for (const PipelineStep& st : steps) microbatches = std::max({microbatches, st.microbatch + 1, st.recv_microbatch + 1});
  const std::vector<std::int64_t> sizes(static_cast<std::size_t>(microbatches), message_size);
  run_pipeline_stage(pp, steps, model, std::span<const std::int64_t>(sizes));
}

}  // namespace verl::parallel
