// Batched generation with a KV cache: the reference RolloutEngine.
//
// Each prompt is prefilled once (all prompts in one pass over their valid tokens), its cache is
// copied to its n samples, and every decode step feeds the still-running samples one token each.
// A sample stops after an EOS / stop token (kept in the response) or at max_response_length.
// Left padding never reaches the model: a prompt's valid tokens get positions 0.. (verl's
// cumsum(attention_mask) - 1), so a left-padded prompt decodes exactly as it would alone, and
// the random numbers of a sample depend only on (its prompt's seed, its sample index, the step).
// The cache holds exactly prompt_length + max_response_length - 1 tokens per sample (the last
// sampled token is never fed back).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/cpu/thread_pool.hpp"
#include "verl/rollout/rollout_engine.hpp"
#include "verl/rollout/sampling.hpp"

namespace verl::rollout {

namespace detail {

template <class M>
using kv_cache_of = decltype(std::declval<const M&>().make_kv_cache(std::span<const Index>{}));

template <class M>
concept reports_vocab_and_context = requires(const M& model) {
  { model.vocab_size() } -> std::convertible_to<Index>;
  { model.context_length() } -> std::convertible_to<Index>;
};

template <class M>
concept makes_kv_cache = requires { typename kv_cache_of<M>; } &&
                         requires(kv_cache_of<M>& cache, Index sequence) {
                           cache.copy_sequence(sequence, sequence);
                           { cache.bytes() } -> std::convertible_to<std::size_t>;
                         };

/// A model that lends its thread pool (the rollout samples its rows on it between passes).
template <class M>
concept lends_thread_pool = requires(const M& model) {
  { model.thread_pool() } -> std::same_as<cpu::ThreadPool&>;
};

template <class M>
concept extends_kv_cache = makes_kv_cache<M> && requires(M& model, kv_cache_of<M>& cache,
                                                         std::span<const Index> sequences,
                                                         std::span<const TokenId> tokens,
                                                         std::span<const std::int64_t> offsets) {
  { model.extend(cache, sequences, tokens, offsets, offsets) } -> std::same_as<MatrixF>;
};

}  // namespace detail

/// A model rollout can drive: vocab_size(), context_length(), make_kv_cache(capacities) (a cache
/// with copy_sequence(from, to) and bytes()), and extend(cache, sequences, tokens, chunk_offsets,
/// positions) -> the float logits of each chunk's last token.
template <class M>
concept IncrementalDecoder = detail::reports_vocab_and_context<M> && detail::makes_kv_cache<M> &&
                             detail::extends_kv_cache<M>;

template <class M>
consteval bool check_incremental_decoder() {
  VERL_STATIC_ASSERT(detail::reports_vocab_and_context<M>, THE_MODEL_MUST_REPORT_VOCAB_SIZE_AND_CONTEXT_LENGTH);
  VERL_STATIC_ASSERT(detail::makes_kv_cache<M>, THE_MODEL_NEEDS_MAKE_KV_CACHE_RETURNING_A_COPYABLE_CACHE);
  VERL_STATIC_ASSERT(detail::extends_kv_cache<M>, THE_MODEL_NEEDS_EXTEND_OF_A_KV_CACHE_RETURNING_FLOAT_LOGITS);
  return true;
}

template <class Model>
class KvCacheRollout {
  static_assert(check_incremental_decoder<Model>());

 public:
  explicit KvCacheRollout(Model& model) : model_(&model) {}

  RolloutOutput generate(const PromptBatch& prompts, const SamplingParams& params) {
    params.validate();
    const Index batch = prompts.input_ids.rows(), width = prompts.input_ids.cols();
    verl::detail::require_same_shape("attention_mask", shape_of(prompts.attention_mask), "input_ids",
                                     shape_of(prompts.input_ids));
    verl::detail::require_binary_mask("attention_mask", prompts.attention_mask);
    VERL_CHECK_ARG(prompts.seeds.empty() || static_cast<Index>(prompts.seeds.size()) == batch,
                   "seeds: expected {} per-prompt seeds (one per prompt) or none, got {}", batch, prompts.seeds.size());
    VERL_CHECK_ARG(batch > 0, "input_ids: expected at least one prompt, got shape ({}, {})", batch, width);
    const Index vocab = model_->vocab_size(), context = model_->context_length();
    const Index n = params.n, response = params.max_response_length;

    // Valid prompt tokens, packed.
    std::vector<TokenId> prompt_tokens;
    std::vector<std::int64_t> prompt_offsets = {0}, prompt_positions;
    std::vector<Index> prompt_lengths(static_cast<std::size_t>(batch));
    for (Index b = 0; b < batch; ++b) {
      Index length = 0;
      for (Index t = 0; t < width; ++t) {
        if (prompts.attention_mask(b, t) == 0) continue;
        const TokenId id = prompts.input_ids(b, t);
        VERL_CHECK_ARG(id >= 0 && id < vocab, "input_ids: expected token ids in [0, {}) (vocab_size), got {} at ({}, {})",
                       vocab, id, b, t);
        prompt_tokens.push_back(id);
        prompt_positions.push_back(length++);
      }
      VERL_CHECK_ARG(length > 0, "input_ids: prompt {} has no tokens (its attention_mask row is all 0)", b);
      VERL_CHECK_ARG(length + response <= context,
                     "input_ids: prompt {} has {} tokens; with max_response_length {} it needs {} positions, more "
                     "than the model's context length {}",
                     b, length, response, length + response, context);
      prompt_lengths[static_cast<std::size_t>(b)] = length;
      prompt_offsets.push_back(static_cast<std::int64_t>(prompt_tokens.size()));
    }

    const Index rows = batch * n;
    std::vector<Index> capacities(static_cast<std::size_t>(rows));
    for (Index r = 0; r < rows; ++r) capacities[static_cast<std::size_t>(r)] = prompt_lengths[static_cast<std::size_t>(r / n)] + response - 1;
    auto cache = model_->make_kv_cache(capacities);

    RolloutOutput out;
    out.responses = MatrixI64::Constant(rows, response, params.pad_token_id);
    out.response_mask = MatrixF::Zero(rows, response);
    out.rollout_log_probs = MatrixF::Zero(rows, response);
    out.response_lengths.assign(static_cast<std::size_t>(rows), 0);
    out.finish_reasons.assign(static_cast<std::size_t>(rows), FinishReason::length);
    out.kv_cache_bytes = cache.bytes();

    // Prefill: one pass over every prompt, into the cache of its first sample.
    std::vector<Index> first_samples(static_cast<std::size_t>(batch));
    for (Index b = 0; b < batch; ++b) first_samples[static_cast<std::size_t>(b)] = b * n;
    const MatrixF prompt_logits = model_->extend(cache, first_samples, prompt_tokens, prompt_offsets, prompt_positions);
    for (Index b = 0; b < batch; ++b) {
      for (Index j = 1; j < n; ++j) cache.copy_sequence(b * n, b * n + j);
    }

    // Decode: `active` rows, whose next-token logits are the rows of `logits` in that order.
    std::vector<Index> active(static_cast<std::size_t>(rows));
    for (Index r = 0; r < rows; ++r) active[static_cast<std::size_t>(r)] = r;
    MatrixF logits(rows, vocab);
    for (Index r = 0; r < rows; ++r) logits.row(r) = prompt_logits.row(r / n);
    std::vector<SampledToken> sampled(static_cast<std::size_t>(rows));
    std::vector<Index> still_running;
    std::vector<TokenId> step_tokens;
    std::vector<std::int64_t> step_offsets, step_positions;
    for (Index step = 0; step < response && !active.empty(); ++step) {
      still_running.clear();
      step_tokens.clear();
      step_positions.clear();
      // Each row's draw depends only on its seed, sample index and step, so the rows are sampled
      // independently, on the model's threads when it lends them.
      const auto sample_row = [&](Index i) {
        const Index r = active[static_cast<std::size_t>(i)], b = r / n, j = r % n;
        const std::uint64_t seed = prompts.seeds.empty() ? derive_seed(params.seed, static_cast<std::uint64_t>(b))
                                                         : prompts.seeds[static_cast<std::size_t>(b)];
        const double u = counter_uniform(seed, static_cast<std::uint64_t>(j), static_cast<std::uint64_t>(step));
        thread_local SamplerScratch scratch;
        sampled[static_cast<std::size_t>(i)] = sample_token(
            std::span<const float>(logits.data() + i * vocab, static_cast<std::size_t>(vocab)), params, u, scratch);
      };
      const auto sampling_rows = static_cast<Index>(active.size());
      if constexpr (detail::lends_thread_pool<Model>) {
        model_->thread_pool().parallel_for(sampling_rows, sample_row);
      } else {
        for (Index i = 0; i < sampling_rows; ++i) sample_row(i);
      }
      for (std::size_t i = 0; i < active.size(); ++i) {
        const Index r = active[i], b = r / n;
        const SampledToken token = sampled[i];
        out.responses(r, step) = token.token;
        out.response_mask(r, step) = 1.0f;
        out.rollout_log_probs(r, step) = token.log_prob;
        out.response_lengths[static_cast<std::size_t>(r)] = step + 1;
        if (params.is_stop_token(token.token)) {
          out.finish_reasons[static_cast<std::size_t>(r)] = FinishReason::stop;
        } else if (step + 1 < response) {
          still_running.push_back(r);
          step_tokens.push_back(token.token);
          step_positions.push_back(prompt_lengths[static_cast<std::size_t>(b)] + step);
        }
      }
      active.swap(still_running);
      if (active.empty()) break;
      step_offsets.resize(active.size() + 1);
      for (std::size_t i = 0; i <= active.size(); ++i) step_offsets[i] = static_cast<std::int64_t>(i);
      logits = model_->extend(cache, active, step_tokens, step_offsets, step_positions);
    }
    assemble_rollout_tensors(prompts, n, out);
    return out;
  }

 private:
  Model* model_;
};

}  // namespace verl::rollout
