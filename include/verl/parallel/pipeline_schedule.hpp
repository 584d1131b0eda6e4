// Pipeline-parallel schedules as generated step sequences per stage — GPipe (all forwards,
// then all backwards) and 1F1B (Megatron's non-interleaved schedule: warm-up forwards, then one
// forward / one backward, then cool-down backwards) — including the sends and receives between
// neighbouring stages, paired like Megatron's p2p calls so that blocking transports cannot
// deadlock. A simulator runs the steps of all stages with rendezvous semantics and unit-time
// compute, checks every dependency, and reports the makespan and the bubble fraction.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/parallel/fraction.hpp"

namespace verl::parallel {

enum class PipelineAction : std::uint8_t {
  forward,
  backward,
  recv_forward,                ///< activation of `microbatch` from the previous stage
  send_forward,                ///< activation of `microbatch` to the next stage
  recv_backward,               ///< gradient of `microbatch` from the next stage
  send_backward,               ///< gradient of `microbatch` to the previous stage
  send_forward_recv_backward,  ///< activation of `microbatch` out, gradient of `recv_microbatch` in (next stage)
  send_backward_recv_forward,  ///< gradient of `microbatch` out, activation of `recv_microbatch` in (previous stage)
};

constexpr std::string_view to_string(PipelineAction action) noexcept {
  switch (action) {
    case PipelineAction::forward: return "forward";
    case PipelineAction::backward: return "backward";
    case PipelineAction::recv_forward: return "recv_forward";
    case PipelineAction::send_forward: return "send_forward";
    case PipelineAction::recv_backward: return "recv_backward";
    case PipelineAction::send_backward: return "send_backward";
    case PipelineAction::send_forward_recv_backward: return "send_forward_recv_backward";
    case PipelineAction::send_backward_recv_forward: return "send_backward_recv_forward";
  }
  return "?";
}

struct PipelineStep {
  PipelineAction action;
  std::int64_t microbatch = 0;
  std::int64_t recv_microbatch = -1;  ///< only for the combined actions
  friend bool operator==(const PipelineStep&, const PipelineStep&) = default;
};

namespace detail {

/// Appends steps, dropping the halves that have no peer on the first or last stage.
class StepWriter {
 public:
  StepWriter(std::int64_t stage, std::int64_t stages) : first_(stage == 0), last_(stage == stages - 1) {}

  void forward(std::int64_t mb) { steps.push_back({PipelineAction::forward, mb}); }
  void backward(std::int64_t mb) { steps.push_back({PipelineAction::backward, mb}); }
  void recv_forward(std::int64_t mb) {
    if (!first_) steps.push_back({PipelineAction::recv_forward, mb});
  }
  void send_forward(std::int64_t mb) {
    if (!last_) steps.push_back({PipelineAction::send_forward, mb});
  }
  void recv_backward(std::int64_t mb) {
    if (!last_) steps.push_back({PipelineAction::recv_backward, mb});
  }
  void send_backward(std::int64_t mb) {
    if (!first_) steps.push_back({PipelineAction::send_backward, mb});
  }
  // Both halves talk to the next stage: nothing on the last stage.
  void send_forward_recv_backward(std::int64_t send_mb, std::int64_t recv_mb) {
    if (!last_) steps.push_back({PipelineAction::send_forward_recv_backward, send_mb, recv_mb});
  }
  // Both halves talk to the previous stage: nothing on the first stage.
  void send_backward_recv_forward(std::int64_t send_mb, std::int64_t recv_mb) {
    if (!first_) steps.push_back({PipelineAction::send_backward_recv_forward, send_mb, recv_mb});
  }

  std::vector<PipelineStep> steps;

 private:
  bool first_, last_;
};

inline void check_pipeline_shape(std::int64_t stage, std::int64_t stages, std::int64_t microbatches) {
  VERL_CHECK_ARG(stages > 0, "stages: expected a positive count, got {}", stages);
  VERL_CHECK_ARG(stage >= 0 && stage < stages, "stage: expected a stage in [0, {}), got {}", stages, stage);
  VERL_CHECK_ARG(microbatches > 0, "microbatches: expected a positive count, got {}", microbatches);
}

}  // namespace detail

/// GPipe: every forward, then every backward (micro-batches in order).
struct GPipe {
  static constexpr std::string_view name = "gpipe";
  static std::vector<PipelineStep> steps(std::int64_t stage, std::int64_t stages, std::int64_t microbatches) {
    detail::check_pipeline_shape(stage, stages, microbatches);
    detail::StepWriter w(stage, stages);
    for (std::int64_t mb = 0; mb < microbatches; ++mb) {
      w.recv_forward(mb);
      w.forward(mb);
      w.send_forward(mb);
    }
    for (std::int64_t mb = 0; mb < microbatches; ++mb) {
      w.recv_backward(mb);
      w.backward(mb);
      w.send_backward(mb);
    }
    return std::move(w.steps);
  }
};

/// 1F1B (PipeDream-Flush, Megatron's forward_backward_pipelining_without_interleaving): stage s
/// runs min(p - s - 1, m) warm-up forwards, then alternates one forward and one backward, then
/// finishes the remaining backwards. At most p - s activations are alive on stage s.
struct OneFOneB {
  static constexpr std::string_view name = "1f1b";
  static std::vector<PipelineStep> steps(std::int64_t stage, std::int64_t stages, std::int64_t microbatches) {
    detail::check_pipeline_shape(stage, stages, microbatches);
    detail::StepWriter w(stage, stages);
    const std::int64_t warmup = std::min(stages - stage - 1, microbatches);
    const std::int64_t steady = microbatches - warmup;
    for (std::int64_t mb = 0; mb < warmup; ++mb) {
      w.recv_forward(mb);
      w.forward(mb);
      w.send_forward(mb);
    }
    if (steady > 0) w.recv_forward(warmup);
    for (std::int64_t i = 0; i < steady; ++i) {
      const std::int64_t forward_mb = warmup + i;
      w.forward(forward_mb);
      w.send_forward_recv_backward(forward_mb, i);
      w.backward(i);
      if (i == steady - 1) {
        w.send_backward(i);
      } else {
        w.send_backward_recv_forward(i, forward_mb + 1);
      }
    }
    for (std::int64_t mb = steady; mb < microbatches; ++mb) {
      w.recv_backward(mb);
      w.backward(mb);
      w.send_backward(mb);
    }
    return std::move(w.steps);
  }
};

/// A schedule generates each stage's steps.
template <class S>
concept PipelineSchedule = requires(std::int64_t i) {
  { S::name } -> std::convertible_to<std::string_view>;
  { S::steps(i, i, i) } -> std::same_as<std::vector<PipelineStep>>;
};

/// The steps of every stage.
template <PipelineSchedule S>
std::vector<std::vector<PipelineStep>> pipeline_steps(std::int64_t stages, std::int64_t microbatches) {
  std::vector<std::vector<PipelineStep>> all;
  for (std::int64_t s = 0; s < stages; ++s) all.push_back(S::steps(s, stages, microbatches));
  return all;
}

/// One compute step as simulated.
struct ComputeEvent {
  std::int64_t stage;
  PipelineAction action;  ///< forward or backward
  std::int64_t microbatch;
  std::int64_t start;
  std::int64_t end;
};

struct PipelineTimeline {
  std::int64_t makespan = 0;
  std::vector<ComputeEvent> events;          ///< in simulation order
  std::vector<std::int64_t> peak_activations;  ///< per stage: forwards done minus backwards done, at most
  /// Idle share of stages x makespan: 1 - (work per stage) / makespan.
  Fraction bubble_fraction{0};
};

/// Runs every stage's steps with rendezvous semantics (a send completes when the peer reaches
/// the matching receive, a combined step when both halves have), forward_time and
/// backward_time units per compute step and no time for messages. Throws InvalidArgument when a
/// step runs before its data (naming stage, step and micro-batch) or when the stages deadlock.
inline PipelineTimeline simulate_pipeline(const std::vector<std::vector<PipelineStep>>& steps,
                                          std::int64_t microbatches, std::int64_t forward_time = 1,
                                          std::int64_t backward_time = 1) {
  const auto stages = static_cast<std::int64_t>(steps.size());
  VERL_CHECK_ARG(stages > 0, "steps: expected at least one stage, got {}", stages);
  VERL_CHECK_ARG(microbatches > 0, "microbatches: expected a positive count, got {}", microbatches);
  VERL_CHECK_ARG(forward_time > 0 && backward_time > 0, "forward_time, backward_time: expected positive times, got {}, {}",
                 forward_time, backward_time);
  const auto S = static_cast<std::size_t>(stages), M = static_cast<std::size_t>(microbatches);
  // Per stage and micro-batch: what has happened so far.
  std::vector<std::vector<char>> forwarded(S, std::vector<char>(M)), backwarded(S, std::vector<char>(M)),
      activation_in(S, std::vector<char>(M)), gradient_in(S, std::vector<char>(M));
  std::vector<std::size_t> pc(S, 0);
  std::vector<std::int64_t> clock(S, 0), alive(S, 0);
  std::vector<char> send_done(S, 0), recv_done(S, 0);  // halves of the current step
  PipelineTimeline timeline;
  timeline.peak_activations.assign(S, 0);

  auto fail = [&](std::size_t s, std::string_view what) {
    const PipelineStep& st = steps[s][pc[s]];
    ::verl::detail::throw_invalid_argument("steps: stage {} step {} ({} of micro-batch {}): {}", s, pc[s],
                                           to_string(st.action), st.microbatch, what);
  };
  auto check_mb = [&](std::size_t s, std::int64_t mb) {
    if (mb < 0 || mb >= microbatches) fail(s, fmt::format("expected a micro-batch in [0, {})", microbatches));
  };
  // The send half of a step: (peer, is_forward, micro-batch); none when it has none.
  struct Half {
    bool present = false;
    std::int64_t peer = 0;
    bool forward = true;
    std::int64_t mb = 0;
  };
  auto send_half = [&](std::size_t s) -> Half {
    const PipelineStep& st = steps[s][pc[s]];
    switch (st.action) {
      case PipelineAction::send_forward:
      case PipelineAction::send_forward_recv_backward: return {true, static_cast<std::int64_t>(s) + 1, true, st.microbatch};
      case PipelineAction::send_backward:
      case PipelineAction::send_backward_recv_forward: return {true, static_cast<std::int64_t>(s) - 1, false, st.microbatch};
      default: return {};
    }
  };
  auto recv_half = [&](std::size_t s) -> Half {
    const PipelineStep& st = steps[s][pc[s]];
    switch (st.action) {
      case PipelineAction::recv_forward: return {true, static_cast<std::int64_t>(s) - 1, true, st.microbatch};
      case PipelineAction::recv_backward: return {true, static_cast<std::int64_t>(s) + 1, false, st.microbatch};
      case PipelineAction::send_forward_recv_backward:
        return {true, static_cast<std::int64_t>(s) + 1, false, st.recv_microbatch};
      case PipelineAction::send_backward_recv_forward:
        return {true, static_cast<std::int64_t>(s) - 1, true, st.recv_microbatch};
      default: return {};
    }
  };

  std::size_t done_stages = 0;
  for (std::size_t s = 0; s < S; ++s) done_stages += steps[s].empty();
  while (done_stages < S) {
    bool progress = false;
    for (std::size_t s = 0; s < S; ++s) {
      if (pc[s] >= steps[s].size()) continue;
      const PipelineStep& st = steps[s][pc[s]];
      check_mb(s, st.microbatch);
      const auto mb = static_cast<std::size_t>(st.microbatch);
      if (st.action == PipelineAction::forward || st.action == PipelineAction::backward) {
        const bool forward = st.action == PipelineAction::forward;
        if (forward) {
          if (forwarded[s][mb]) fail(s, "expected each forward once");
          if (s > 0 && !activation_in[s][mb]) fail(s, "expected the activation from the previous stage first");
        } else {
          if (backwarded[s][mb]) fail(s, "expected each backward once");
          if (!forwarded[s][mb]) fail(s, "expected the forward of the micro-batch first");
          if (s + 1 < S && !gradient_in[s][mb]) fail(s, "expected the gradient from the next stage first");
        }
        const std::int64_t start = clock[s];
        clock[s] += forward ? forward_time : backward_time;
        timeline.events.push_back({static_cast<std::int64_t>(s), st.action, st.microbatch, start, clock[s]});
        (forward ? forwarded : backwarded)[s][mb] = 1;
        alive[s] += forward ? 1 : -1;
        timeline.peak_activations[s] = std::max(timeline.peak_activations[s], alive[s]);
        ++pc[s];
        progress = true;
      } else {
        const Half out = send_half(s), in = recv_half(s);
        if (out.present && !send_done[s]) {
          if (out.peer < 0 || out.peer >= stages) fail(s, "expected a neighbouring stage to send to");
          if (out.forward ? !forwarded[s][mb] : !backwarded[s][mb]) fail(s, "expected to send computed data");
          const auto p = static_cast<std::size_t>(out.peer);
          if (pc[p] < steps[p].size() && !recv_done[p]) {
            const Half peer_in = recv_half(p);
            if (peer_in.present && peer_in.peer == static_cast<std::int64_t>(s) && peer_in.forward == out.forward &&
                peer_in.mb == out.mb) {
              const std::int64_t t = std::max(clock[s], clock[p]);
              clock[s] = clock[p] = t;
              send_done[s] = recv_done[p] = 1;
              (out.forward ? activation_in : gradient_in)[p][static_cast<std::size_t>(out.mb)] = 1;
              progress = true;
            }
          }
        }
        if (in.present) check_mb(s, in.mb);
        const bool complete = (!out.present || send_done[s]) && (!in.present || recv_done[s]);
        if (complete) {
          send_done[s] = recv_done[s] = 0;
          ++pc[s];
          progress = true;
        }
      }
      if (pc[s] >= steps[s].size()) ++done_stages;
    }
    if (!progress) {
      std::string waiting;
      for (std::size_t s = 0; s < S; ++s) {
        if (pc[s] < steps[s].size()) {
          waiting += fmt::format("{}stage {} at {} of micro-batch {}", waiting.empty() ? "" : "; ", s,
                                 to_string(steps[s][pc[s]].action), steps[s][pc[s]].microbatch);
        }
      }
      ::verl::detail::throw_invalid_argument("steps: expected a schedule without deadlock, got stuck with {}", waiting);
    }
  }
  for (std::size_t s = 0; s < S; ++s) {
    for (std::size_t mb = 0; mb < M; ++mb) {
      VERL_CHECK_ARG(forwarded[s][mb] && backwarded[s][mb],
                     "steps: expected every micro-batch forward and backward on every stage, stage {} misses {}", s, mb);
    }
    timeline.makespan = std::max(timeline.makespan, clock[s]);
  }
  const std::int64_t work = microbatches * (forward_time + backward_time);
  timeline.bubble_fraction = Fraction{timeline.makespan - work, timeline.makespan};
  return timeline;
}

}  // namespace verl::parallel
