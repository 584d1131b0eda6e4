// Runs one stage's pipeline steps (pipeline_schedule.hpp) over a communicator whose rank i is
// stage i: activations travel forward, gradients backward, with the same pairing of sends and
// receives as the schedule (combined steps use send_recv, so blocking transports cannot deadlock).
#pragma once

#include <concepts>
#include <cstdint>
#include <map>
#include <span>
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

/// Executes `steps` as stage pp.rank() of pp.size(); every message has `message_size` floats.
template <Communicator C, PipelineStageModel M>
void run_pipeline_stage(C& pp, std::span<const PipelineStep> steps, M& model, std::int64_t message_size) {
  VERL_CHECK_ARG(message_size > 0, "message_size: expected a positive size, got {}", message_size);
  const int stage = pp.rank(), next = stage + 1, prev = stage - 1;
  const auto size = static_cast<std::size_t>(message_size);
  std::map<std::int64_t, std::vector<float>> inputs, outputs, grad_outputs, grad_inputs;
  auto buffer = [&](std::map<std::int64_t, std::vector<float>>& m, std::int64_t mb) -> std::vector<float>& {
    auto& b = m[mb];
    b.resize(size);
    return b;
  };
  auto keep = [&](std::map<std::int64_t, std::vector<float>>& m, std::int64_t mb, std::span<const float> data) {
    VERL_CHECK_ARG(data.size() == size, "model: expected {} floats per message, got {} for micro-batch {}", size,
                   data.size(), mb);
    m[mb].assign(data.begin(), data.end());
  };
  constexpr int tag = 0;
  for (const PipelineStep& st : steps) {
    switch (st.action) {
      case PipelineAction::recv_forward: pp.recv(std::span(buffer(inputs, st.microbatch)), prev, tag); break;
      case PipelineAction::recv_backward: pp.recv(std::span(buffer(grad_outputs, st.microbatch)), next, tag); break;
      case PipelineAction::forward: {
        const std::span<const float> in =
            stage == 0 ? std::span<const float>() : std::span<const float>(inputs.at(st.microbatch));
        keep(outputs, st.microbatch, model.forward(st.microbatch, in));
        inputs.erase(st.microbatch);
        break;
      }
      case PipelineAction::backward: {
        const std::span<const float> grad = stage == pp.size() - 1
                                                ? std::span<const float>()
                                                : std::span<const float>(grad_outputs.at(st.microbatch));
        const std::span<const float> grad_in = model.backward(st.microbatch, grad);
        if (stage > 0) keep(grad_inputs, st.microbatch, grad_in);
        grad_outputs.erase(st.microbatch);
        break;
      }
      case PipelineAction::send_forward:
        pp.send(std::span<const float>(outputs.at(st.microbatch)), next, tag);
        outputs.erase(st.microbatch);
        break;
      case PipelineAction::send_backward:
        pp.send(std::span<const float>(grad_inputs.at(st.microbatch)), prev, tag);
        grad_inputs.erase(st.microbatch);
        break;
      case PipelineAction::send_forward_recv_backward:
        pp.send_recv(std::span<const float>(outputs.at(st.microbatch)), next,
                     std::span(buffer(grad_outputs, st.recv_microbatch)), next, tag);
        outputs.erase(st.microbatch);
        break;
      case PipelineAction::send_backward_recv_forward:
        pp.send_recv(std::span<const float>(grad_inputs.at(st.microbatch)), prev,
                     std::span(buffer(inputs, st.recv_microbatch)), prev, tag);
        grad_inputs.erase(st.microbatch);
        break;
    }
  }
  // The last stage never sends its outputs: drop them.
  outputs.clear();
}

}  // namespace verl::parallel
