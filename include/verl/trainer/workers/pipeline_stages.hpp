// Megatron's pipeline parallelism in the workers (the actor's and reference's, the critic's): the
// passes of micro-batches through the stages, the last stage (looking like the model to the code
// that computes the losses), the earlier stages, and the stages' checkpoint states gathered on
// the first.
//
// A model that runs as a pipeline stage (model::TensorParallelTransformer, TensorParallelCritic)
// offers first_stage() / last_stage(), forward_stage / backward_stage / take_saved_pass /
// restore_saved_pass / stage_input_gradient before the last stage, a forward taking the previous
// stage's activations on the last, and sequence_parallel() / tp_size(). Activations and their
// gradients travel between neighbouring stages as (rows x hidden) messages whose sizes every stage
// knows from the micro-batch's tokens (micro-batches differ); under Megatron's sequence
// parallelism each TP rank sends its slice of the tokens to the same TP rank of the next stage.
#pragma once

#include <Eigen/Core>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/model/transformer/decoder.hpp"
#include "verl/parallel/pipeline_executor.hpp"
#include "verl/parallel/pipeline_schedule.hpp"
#include "verl/trainer/workers/batch_keys.hpp"
#include "verl/trainer/workers/role_state.hpp"

namespace verl::trainer {

/// The rows of the activations (and their gradients) a stage exchanges for a micro-batch of
/// `tokens` tokens: every token, or under Megatron's sequence parallelism this TP rank's slice,
/// sent to the same TP rank of the neighbouring stage (as Megatron's stages exchange the
/// sequence-parallel slices: 1/tp of the bytes).
template <class Model>
Index stage_message_rows(const Model& model, Index tokens) {
  return model.sequence_parallel() && model.tp_size() > 1 ? model::sequence_slice_rows(tokens, model.tp_size()) : tokens;
}

/// One pipeline pass over a batch: the schedule's steps on this stage, each micro-batch's rows
/// and message size (its tokens, or its sequence-parallel slice, x hidden size).
struct PipelinePass {
  std::vector<parallel::PipelineStep> steps;
  std::vector<std::pair<Index, Index>> rows;
  std::vector<std::int64_t> message_sizes;
};

/// The pass of `rows` (micro-batches of `batch`) on stage `stage` of `stages`: forward only
/// (log-probs, values) or 1F1B (an update).
template <class Model>
PipelinePass pipeline_pass(const Model& model, const data::DataProto& batch, std::vector<std::pair<Index, Index>> rows,
                           bool forward_only, int stage, int stages) {
  PipelinePass pass;
  const Index hidden = model.config().hidden_size;
  for (const auto& [b, e] : rows) pass.message_sizes.push_back(stage_message_rows(model, token_batch(batch, b, e).num_tokens()) * hidden);
  const auto m = static_cast<std::int64_t>(rows.size());
  pass.steps = forward_only ? parallel::forward_only_steps(stage, stages, m) : parallel::OneFOneB::steps(stage, stages, m);
  pass.rows = std::move(rows);
  return pass;
}

/// The last stage as the code that computes the losses drives it, looking like the model (its
/// forward(tokens, Options), backward(Cotangents) and zero_grad): each forward receives the
/// previous stage's activations and each backward sends its input gradient, in the order of the
/// schedule's steps for this stage (PipelineStageRunner checks it), one pass after the other
/// (finish_pass between them). The option and cotangent types are the model's (the callers pass
/// them as braced lists).
template <class Model, class Comm, class Options, class Cotangents>
class PipelineLastStage {
 public:
  PipelineLastStage(Model& model, Comm& pp, std::vector<PipelinePass> passes)
      : model_(&model), pp_(&pp), passes_(std::move(passes)) {}

  void zero_grad() { model_->zero_grad(); }
  /// The model's forward from the previous stage's activations for `tokens`.
  auto forward(const model::TokenBatch& tokens, const Options& options) {
    const RowMatrix<float>& input = receive(tokens.num_tokens());
    auto out = model_->forward(tokens, options, &input);
    runner_->end({});
    return out;
  }
  /// The model's backward; its stage input's gradient goes to the previous stage.
  void backward(const Cotangents& cotangents) {
    VERL_CHECK_ARG(runner_.has_value(), "pipeline: backward before any forward");
    runner_->begin(parallel::PipelineAction::backward, backwards_++);
    model_->backward(cotangents);
    const RowMatrix<float>& grad = model_->stage_input_gradient();
    runner_->end(std::span<const float>(grad.data(), static_cast<std::size_t>(grad.size())));
  }
  /// Runs the pass's last messages (the last gradient to the previous stage).
  void finish_pass() {
    if (!runner_) return;
    runner_->finish();
    runner_.reset();
    ++pass_;
  }
  [[nodiscard]] bool finished() const { return !runner_ && pass_ == passes_.size(); }

 private:
  /// The previous stage's activations for the next forward, of a micro-batch of `tokens` tokens.
  const RowMatrix<float>& receive(Index tokens) {
    if (!runner_) {
      VERL_CHECK_ARG(pass_ < passes_.size(), "pipeline: more passes than planned ({})", passes_.size());
      runner_.emplace(*pp_, passes_[pass_].steps, passes_[pass_].message_sizes);
      forwards_ = backwards_ = 0;
    }
    const std::int64_t mb = forwards_++;
    const auto& sizes = passes_[pass_].message_sizes;
    const Index hidden = model_->config().hidden_size, rows = stage_message_rows(*model_, tokens);
    VERL_CHECK_ARG(mb < static_cast<std::int64_t>(sizes.size()) && rows * hidden == sizes[static_cast<std::size_t>(mb)],
                   "pipeline: micro-batch {} of pass {} has {} tokens, the stages planned {} micro-batches of sizes {}", mb,
                   pass_, tokens, sizes.size(), fmt::join(sizes, ", "));
    const std::span<const float> in = runner_->begin(parallel::PipelineAction::forward, mb);
    input_ = Eigen::Map<const RowMatrix<float>>(in.data(), rows, hidden);
    return input_;
  }

  Model* model_;
  Comm* pp_;
  std::vector<PipelinePass> passes_;
  std::size_t pass_ = 0;
  std::int64_t forwards_ = 0, backwards_ = 0;
  std::optional<parallel::PipelineStageRunner<Comm>> runner_;
  RowMatrix<float> input_;
};

/// A stage before the last as run_pipeline_stage drives it: its layers over each micro-batch's
/// tokens; under 1F1B each forward pass's saved state waits for its backward (take_saved_pass).
template <class Model>
struct EarlierStage {
  Model* model;
  const data::DataProto* batch;
  const PipelinePass* pass;
  bool keep_activations;
  std::map<std::int64_t, typename model::DecoderBody<float>::SavedPass> waiting{};
  std::vector<float> output{};
  RowMatrix<float> input{}, grad_output{};

  std::span<const float> forward(std::int64_t mb, std::span<const float> in) {
    const auto& [b, e] = pass->rows.at(static_cast<std::size_t>(mb));
    const model::TokenBatch tokens = token_batch(*batch, b, e);
    const Index hidden = model->config().hidden_size;
    const RowMatrix<float>* x = nullptr;
    if (!model->first_stage()) {
      input = Eigen::Map<const RowMatrix<float>>(in.data(), stage_message_rows(*model, tokens.num_tokens()), hidden);
      x = &input;
    }
    const RowMatrix<float>& out = model->forward_stage(tokens, x, keep_activations);
    output.assign(out.data(), out.data() + out.size());
    if (keep_activations) waiting.emplace(mb, model->take_saved_pass());
    return output;
  }
  std::span<const float> backward(std::int64_t mb, std::span<const float> grad) {
    const auto found = waiting.find(mb);
    VERL_CHECK_ARG(found != waiting.end(), "pipeline: backward of micro-batch {} without its forward", mb);
    model->restore_saved_pass(std::move(found->second));
    waiting.erase(found);
    const Index hidden = model->config().hidden_size;
    grad_output = Eigen::Map<const RowMatrix<float>>(grad.data(), static_cast<Index>(grad.size()) / hidden, hidden);
    model->backward_stage(grad_output);
    if (model->first_stage()) return {};
    const RowMatrix<float>& g = model->stage_input_gradient();
    return {g.data(), static_cast<std::size_t>(g.size())};
  }
};

/// Runs `passes` on a stage before the last: each pass's schedule with its own micro-batches,
/// then `after_pass()` (an update's optimizer step, which every stage takes once per pass). An
/// update (`keep_activations`) starts each pass from zero gradients.
template <class Model, class Comm, class AfterPass>
void run_earlier_stage(Model& model, Comm& pp, const data::DataProto& batch, std::span<const PipelinePass> passes,
                       bool keep_activations, AfterPass&& after_pass) {
  for (const PipelinePass& pass : passes) {
    if (keep_activations) model.zero_grad();
    EarlierStage<Model> stage{&model, &batch, &pass, keep_activations};
    parallel::run_pipeline_stage(pp, std::span<const parallel::PipelineStep>(pass.steps), stage,
                                 std::span<const std::int64_t>(pass.message_sizes));
    after_pass();
  }
}

/// The parameter tensors of the stages before `stage` (collective over the pipeline group `pp`,
/// stage s is rank s): where this stage's parameters start in the whole model's order.
template <class Model, class Comm>
std::size_t parameters_before_stage(Model& model, Comm& pp, int stage, int stages) {
  std::int64_t mine = 0;
  model.for_each_parameter([&](const auto&) { ++mine; });
  std::vector<std::int64_t> counts(static_cast<std::size_t>(stages));
  pp.all_gather(std::span<const std::int64_t>(&mine, 1), std::span<std::int64_t>(counts));
  std::int64_t before = 0;
  for (int s = 0; s < stage; ++s) before += counts[static_cast<std::size_t>(s)];
  return static_cast<std::size_t>(before);
}

/// A checkpoint state's stages gathered on the first: each later stage's keeping rank sends its
/// gathered tensors (and moments) over its pipeline group `pp` (stage s is rank s), in stage
/// order, and is left with an empty state; stage 0 appends them. `role` names the checkpoint
/// role in errors. Collective over the keeping ranks' pipeline group.
template <class Comm>
void collect_stage_states(Comm& pp, int stage, int stages, RoleState& state, std::string_view role) {
  constexpr int tag = 1;
  if (stage > 0) {
    // Header: tensors, moments per tensor (0 or 1), then per tensor its name's length, rank and shape.
    std::vector<std::int64_t> header{static_cast<std::int64_t>(state.model.size()), state.optimizer.exp_avg.empty() ? 0 : 1};
    std::vector<std::int64_t> names;
    for (const NamedTensor& t : state.model) {
      header.push_back(static_cast<std::int64_t>(t.name.size()));
      header.push_back(static_cast<std::int64_t>(t.shape.size()));
      header.insert(header.end(), t.shape.begin(), t.shape.end());
      for (const char c : t.name) names.push_back(static_cast<unsigned char>(c));
    }
    std::array<std::int64_t, 2> sizes{static_cast<std::int64_t>(header.size()), static_cast<std::int64_t>(names.size())};
    pp.send(std::span<std::int64_t>(sizes), 0, tag);
    pp.send(std::span<std::int64_t>(header), 0, tag);
    pp.send(std::span<std::int64_t>(names), 0, tag);
    for (std::size_t i = 0; i < state.model.size(); ++i) {
      pp.send(std::span<float>(state.model[i].values), 0, tag);
      if (header[1] == 1) {
        pp.send(std::span<float>(state.optimizer.exp_avg[i]), 0, tag);
        pp.send(std::span<float>(state.optimizer.exp_avg_sq[i]), 0, tag);
      }
    }
    state = {};
    return;
  }
  for (int from = 1; from < stages; ++from) {
    std::array<std::int64_t, 2> sizes{};
    pp.recv(std::span<std::int64_t>(sizes), from, tag);
    std::vector<std::int64_t> header(static_cast<std::size_t>(sizes[0])), names(static_cast<std::size_t>(sizes[1]));
    pp.recv(std::span<std::int64_t>(header), from, tag);
    pp.recv(std::span<std::int64_t>(names), from, tag);
    const bool with_moments = header[1] == 1;
    VERL_CHECK_ARG(with_moments == !state.optimizer.exp_avg.empty() || state.model.empty(),
                   "checkpoint role '{}': pipeline stage {} {} optimizer moments, stage 0 {}", role, from,
                   with_moments ? "has" : "has no", with_moments ? "has none" : "has them");
    std::size_t at = 2, name_at = 0;
    for (std::int64_t i = 0; i < header[0]; ++i) {
      NamedTensor t;
      const auto name_length = static_cast<std::size_t>(header[at++]);
      const auto rank = static_cast<std::size_t>(header[at++]);
      for (std::size_t c = 0; c < name_length; ++c) t.name.push_back(static_cast<char>(names[name_at++]));
      t.shape.assign(header.begin() + static_cast<std::ptrdiff_t>(at), header.begin() + static_cast<std::ptrdiff_t>(at + rank));
      at += rank;
      std::int64_t numel = 1;
      for (const auto extent : t.shape) numel *= extent;
      t.values.resize(static_cast<std::size_t>(numel));
      pp.recv(std::span<float>(t.values), from, tag);
      if (with_moments) {
        std::vector<float> m(t.values.size()), v(t.values.size());
        pp.recv(std::span<float>(m), from, tag);
        pp.recv(std::span<float>(v), from, tag);
        state.optimizer.exp_avg.push_back(std::move(m));
        state.optimizer.exp_avg_sq.push_back(std::move(v));
      }
      state.model.push_back(std::move(t));
    }
  }
}

}  // namespace verl::trainer
