// The RolloutEngine concept: what the trainer needs from generation, so that our KV-cache
// engine and an external one (vLLM, SGLang behind a bridge) are interchangeable. Prompts come
// in verl's layout (left-padded input_ids with an attention mask); the output is the batch verl's
// rollout workers return: prompts, responses (padded to max_response_length), the joined
// input_ids / attention_mask / position_ids, the response mask and rollout log-probs.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <span>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/rollout/sampling.hpp"

namespace verl::rollout {

/// Prompts as verl batches them: (B, P) input_ids left-padded, with a 0/1 attention mask.
struct PromptBatch {
  MatrixI64 input_ids;
  MatrixF attention_mask;
  /// Optional per-prompt seeds (B values): sample j of prompt b draws from stream (seeds[b], j),
  /// so a prompt gives the same samples alone as inside any batch. Empty: derived from the
  /// sampling seed and the prompt's index.
  std::vector<std::uint64_t> seeds = {};

  /// Left-pads `prompts` with `pad_token_id` to the longest one.
  static PromptBatch left_padded(std::span<const std::vector<TokenId>> prompts, TokenId pad_token_id) {
    std::size_t width = 0;
    for (const auto& p : prompts) width = std::max(width, p.size());
    PromptBatch batch{MatrixI64::Constant(static_cast<Index>(prompts.size()), static_cast<Index>(width), pad_token_id),
                      MatrixF::Zero(static_cast<Index>(prompts.size()), static_cast<Index>(width)),
                      {}};
    for (std::size_t b = 0; b < prompts.size(); ++b) {
      const auto offset = width - prompts[b].size();
      for (std::size_t t = 0; t < prompts[b].size(); ++t) {
        batch.input_ids(static_cast<Index>(b), static_cast<Index>(offset + t)) = prompts[b][t];
        batch.attention_mask(static_cast<Index>(b), static_cast<Index>(offset + t)) = 1.0f;
      }
    }
    return batch;
  }

  [[nodiscard]] Index size() const { return input_ids.rows(); }
};

/// Why a response ended.
enum class FinishReason : std::uint8_t { stop, length };

/// Rows are prompt-major: row b * n + j is sample j of prompt b (verl's repeat(interleave=True)).
struct RolloutOutput {
  MatrixI64 prompts;            ///< (B*n, P) left-padded
  MatrixI64 responses;          ///< (B*n, R), pad_token_id after the response ends
  MatrixF response_mask;        ///< (B*n, R): 1 up to and including the stop token
  MatrixF rollout_log_probs;    ///< (B*n, R): log-prob of each sampled token (see sampling.hpp), 0 after
  MatrixI64 input_ids;          ///< (B*n, P+R): prompts then responses
  MatrixF attention_mask;       ///< (B*n, P+R)
  MatrixI64 position_ids;       ///< (B*n, P+R): verl's, responses continue from the last prompt position
  std::vector<Index> response_lengths;
  std::vector<FinishReason> finish_reasons;
  std::size_t kv_cache_bytes = 0;  ///< peak KV-cache memory of the call (0 for engines without one)
};

/// Fills verl's joined tensors of `out` from its responses and response mask: prompts repeated
/// n times (row b * n + j), input_ids = prompts ++ responses, the attention mask of both, and
/// position ids (verl's clip(cumsum(mask) - 1, 0) over the prompt, then continuing from the last
/// prompt position over the response). Shared by every engine, ours and external bridges alike.
inline void assemble_rollout_tensors(const PromptBatch& prompts, Index n, RolloutOutput& out) {
  const Index batch = prompts.input_ids.rows(), width = prompts.input_ids.cols();
  const Index rows = batch * n, response = out.responses.cols();
  out.prompts.resize(rows, width);
  out.input_ids.resize(rows, width + response);
  out.attention_mask.resize(rows, width + response);
  out.position_ids.resize(rows, width + response);
  for (Index r = 0; r < rows; ++r) {
    const Index b = r / n;
    out.prompts.row(r) = prompts.input_ids.row(b);
    out.input_ids.row(r) << prompts.input_ids.row(b), out.responses.row(r);
    out.attention_mask.row(r) << prompts.attention_mask.row(b), out.response_mask.row(r);
    std::int64_t seen = 0;
    for (Index t = 0; t < width; ++t) {
      seen += prompts.attention_mask(b, t) != 0 ? 1 : 0;
      out.position_ids(r, t) = std::max<std::int64_t>(seen - 1, 0);
    }
    for (Index t = 0; t < response; ++t) out.position_ids(r, width + t) = seen + t;
  }
}

namespace detail {

template <class E>
concept generates_rollouts = requires(E& engine, const PromptBatch& prompts, const SamplingParams& params) {
  { engine.generate(prompts, params) } -> std::same_as<RolloutOutput>;
};

}  // namespace detail

/// An engine: generate(PromptBatch, SamplingParams) -> RolloutOutput.
template <class E>
concept RolloutEngine = detail::generates_rollouts<E>;

template <class E>
consteval bool check_rollout_engine() {
  VERL_STATIC_ASSERT(detail::generates_rollouts<E>,
                     THE_ROLLOUT_ENGINE_NEEDS_GENERATE_OF_PROMPTS_AND_SAMPLING_PARAMS_RETURNING_ROLLOUT_OUTPUT);
  return true;
}

}  // namespace verl::rollout
