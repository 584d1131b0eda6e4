// The reference policy model: a Llama / Mistral / Qwen2 / Qwen3-family decoder (DecoderBody) with its LM head
// (lm_head, or the embedding matrix when tie_word_embeddings), satisfying CausalLM; plus the KV-cache
// path rollout uses (extend()).
//
// The LM head never materializes all (N, V) logits unless asked to: it runs over chunks of
// tokens, feeding each chunk's logits to the fused log-prob/entropy kernel and keeping only the
// per-token statistics; backward recomputes the chunk's logits (as verl's fused linear
// cross-entropy does).
//
// Under Ulysses sequence parallelism (set_sequence_parallel) every rank of the group is given the
// same batch and computes the LM head over its slice of the packed tokens only; the per-token
// log-probs, entropy and sum_j pi_j^2 (and logits, when asked) are gathered over the group (verl's
// gather_outputs_and_unpad), so forward returns the whole batch's on every rank. backward takes the
// whole batch's cotangents and propagates this rank's tokens' share: parameter gradients are to be
// summed over the group.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "verl/cpu/huge_pages.hpp"
#include "verl/cpu/thread_pool.hpp"
#include "verl/algo/logits/logprob_entropy.hpp"
#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/decoder.hpp"
#include "verl/model/transformer/detail/parameter_module.hpp"
#include "verl/model/transformer/kv_cache.hpp"
#include "verl/model/transformer/sequence_parallel_regions.hpp"
#include "verl/model/transformer/weights.hpp"

namespace verl::model {

namespace detail {

/// Tokens per LM-head chunk: about 16 M logits (64 MiB in float) at a time, so that packing the
/// (V, H) head weight for each chunk's product is amortized over a few hundred tokens.
inline Index lm_head_chunk_rows(Index vocab) {
  return std::clamp<Index>((Index{1} << 24) / std::max<Index>(vocab, 1), 16, 2048);
}

/// Tokens per LM-head chunk of a forward pass over `tokens` tokens that keeps its logits for
/// backward (`logits_saved`): all of them, since every chunk's logits are held at once anyway; one
/// chunk streams the head weight through its three products (logits, input gradient, weight
/// gradient) once instead of once per chunk, and gives the weight gradient's product full-depth
/// k blocks (the 341-token chunks of a 49152-token vocabulary left a block of 85). Otherwise the
/// memory-bounded lm_head_chunk_rows(vocab).
inline Index lm_head_chunk_rows(Index vocab, Index tokens, bool logits_saved) {
  return logits_saved ? std::max<Index>(tokens, 1) : lm_head_chunk_rows(vocab);
}

/// Per-token statistics of softmax(logits / T) that the backward pass needs, for any scalar.
/// float goes through verl::algo::fused_logprob_entropy; double (the finite-difference model)
/// through the plain formulas below.
template <class S>
struct HeadStatistics {
  algo::LogprobEntropy fused;  ///< float: the kernel's saved statistics
  Vector<S> log_normalizer;    ///< double: logsumexp(logits / T)
  Vector<S> entropy;           ///< double
};

template <class S>
HeadStatistics<S> head_forward(const RowMatrix<S>& logits, std::span<const TokenId> labels, float temperature,
                               unsigned threads, S* log_probs, S* entropy, S* sum_pi_squared) {
  HeadStatistics<S> stats;
  const Index rows = logits.rows();
  if constexpr (std::same_as<S, float>) {
    stats.fused = algo::fused_logprob_entropy(logits, labels, {.temperature = temperature, .num_threads = threads});
    for (Index r = 0; r < rows; ++r) {
      if (!labels.empty()) log_probs[r] = stats.fused.log_probs[r];
      entropy[r] = stats.fused.entropy[r];
      sum_pi_squared[r] = stats.fused.sum_pi_squared[r];
    }
  } else {
    stats.log_normalizer.resize(rows);
    stats.entropy.resize(rows);
    const S t = static_cast<S>(temperature);
    for (Index r = 0; r < rows; ++r) {
      const auto x = (logits.row(r).array() / t).eval();
      const S max = x.maxCoeff();
      const S lse = max + std::log((x - max).exp().sum());
      const auto p = (x - lse).exp();
      stats.log_normalizer[r] = lse;
      stats.entropy[r] = lse - (p * x).sum();
      entropy[r] = stats.entropy[r];
      sum_pi_squared[r] = p.square().sum();
      if (!labels.empty()) log_probs[r] = x[labels[static_cast<std::size_t>(r)]] - lse;
    }
  }
  return stats;
}

/// d(loss)/d(raw logits) from the cotangents of log-probs and entropy, written over `logits`.
template <class S>
void head_backward(RowMatrix<S>& logits, std::span<const TokenId> labels, const HeadStatistics<S>& stats,
                   std::span<const S> grad_log_probs, std::span<const S> grad_entropy, float temperature,
                   unsigned threads) {
  if constexpr (std::same_as<S, float>) {
    algo::fused_logprob_entropy_backward_into<RowMatrix<float>, float>(
        logits, labels, stats.fused, {.log_probs = grad_log_probs, .entropy = grad_entropy}, logits,
        {.temperature = temperature, .num_threads = threads});
  } else {
    const S t = static_cast<S>(temperature);
    for (Index r = 0; r < logits.rows(); ++r) {
      const S g_lp = grad_log_probs.empty() ? S(0) : grad_log_probs[static_cast<std::size_t>(r)];
      const S g_h = grad_entropy.empty() ? S(0) : grad_entropy[static_cast<std::size_t>(r)];
      auto row = logits.row(r).array();
      const auto log_p = (row / t - stats.log_normalizer[r]).eval();
      const auto p = log_p.exp().eval();
      // d logp_label/dx_j = [j = label] - p_j ; d H/dx_j = -p_j (log p_j + H); then / T.
      row = (-g_lp * p - g_h * p * (log_p + stats.entropy[r])) / t;
      if (g_lp != S(0)) row[labels[static_cast<std::size_t>(r)]] += g_lp / t;
    }
  }
}

}  // namespace detail

template <class Scalar>
class BasicTransformer : public detail::ParameterModule<BasicTransformer<Scalar>, Scalar> {
 public:
  using scalar_type = Scalar;

  /// Zero-initialized weights of the shapes `config` defines (load a checkpoint or call
  /// init_weights next). Throws verl::NotImplemented for unsupported architectures.
  explicit BasicTransformer(HfModelConfig config, const TransformerOptions& options = {})
      : body_(std::move(config), options) {
    const auto& c = body_.config();
    if (!c.tie_word_embeddings) lm_head_ = ParameterTensor<Scalar>::matrix("lm_head.weight", c.vocab_size, c.hidden_size);
  }

  /// A model with fresh weights drawn as transformers' _init_weights does.
  static BasicTransformer random(HfModelConfig config, const WeightInit& init, const TransformerOptions& options = {}) {
    BasicTransformer model(std::move(config), options);
    model.init_weights(init);
    return model;
  }

  void init_weights(const WeightInit& init) {
    for_each_tensor([&](ParameterTensor<Scalar>& t) { detail::init_parameter(t, init); });
    if (const auto pad = body_.config().pad_token_id; pad && *pad >= 0 && *pad < vocab_size()) {
      body_.weights().embed_tokens.value.row(*pad).setZero();
    }
  }

  [[nodiscard]] const HfModelConfig& config() const { return body_.config(); }
  [[nodiscard]] Index vocab_size() const { return body_.config().vocab_size; }
  /// Positions the model was built for (max_position_embeddings): rollout's limit on
  /// prompt + response length.
  [[nodiscard]] Index context_length() const { return body_.config().max_position_embeddings; }
  [[nodiscard]] unsigned num_threads() const { return body_.pool().size(); }
  /// The model's threads, for work beside its passes (a rollout samples its rows on them).
  [[nodiscard]] cpu::ThreadPool& thread_pool() const { return body_.pool(); }
  [[nodiscard]] DecoderBody<Scalar>& body() { return body_; }
  [[nodiscard]] const DecoderBody<Scalar>& body() const { return body_; }
  /// The sequence-parallel group of the next passes, or none (DecoderBody::set_sequence_parallel).
  void set_sequence_parallel(SequenceParallelRegions<Scalar>* regions) { body_.set_sequence_parallel(regions); }
  /// The (V, H) output projection: lm_head.weight, or the embedding when tied.
  [[nodiscard]] const RowMatrix<Scalar>& head_weight() const {
    return lm_head_.present() ? lm_head_.value : body_.weights().embed_tokens.value;
  }

  // ---- CausalLM ------------------------------------------------------------------------------

  CausalLMOutput<Scalar> forward(const TokenBatch& batch, const ForwardOptions& options) {
    VERL_CHECK_ARG(std::isfinite(options.temperature) && options.temperature > 0,
                   "temperature: expected a finite value > 0, got {}", options.temperature);
    const Index vocab = vocab_size();
    std::vector<TokenId> targets;
    if (!options.targets.empty()) {
      targets = batch.gather(options.targets, "targets");
      body_.require_tokens(targets, "targets");
    }
    saved_ = false;
    const RowMatrix<Scalar>& hidden = body_.forward(batch, options.keep_activations);
    const Index n = hidden.rows();  // this rank's slice of the tokens under sequence parallelism
    const SequenceSlice slice = body_.sequence_slice();
    const bool split = body_.sequence_parallel() != nullptr && body_.sequence_parallel()->size() > 1;
    if (split && !targets.empty()) {  // this slice's targets (padding tokens: 0, their results are dropped)
      std::vector<TokenId> mine(static_cast<std::size_t>(n), 0);
      for (Index t = 0; t < slice.real_rows; ++t)
        mine[static_cast<std::size_t>(t)] = targets[static_cast<std::size_t>(slice.begin + t)];
      targets = std::move(mine);
    }
    const bool stats_wanted = !targets.empty() || options.return_entropy || options.return_sum_pi_squared;

    CausalLMOutput<Scalar> out;
    if (options.return_logits) out.logits = RowMatrix<Scalar>::Zero(batch.layout_size(), vocab);
    std::vector<Scalar> log_probs(stats_wanted ? static_cast<std::size_t>(n) : 0);
    std::vector<Scalar> entropy(log_probs.size()), sum_pi_squared(log_probs.size());
    statistics_.clear();
    saved_logits_.clear();
    const auto slots = batch.slots();
    RowMatrix<Scalar> slice_logits;  // sequence parallelism: this slice's, gathered after the chunks
    if (split && options.return_logits) slice_logits.resize(n, vocab);
    const bool save_logits = options.keep_activations && stats_wanted &&
                             static_cast<double>(n) * static_cast<double>(vocab) * sizeof(Scalar) <=
                                 static_cast<double>(body_.options().max_saved_logits_bytes);
    const Index chunk = detail::lm_head_chunk_rows(vocab, n, save_logits);
    if (options.return_logits || stats_wanted) {
      RowMatrix<Scalar> logits;
      for (Index t0 = 0; t0 < n; t0 += chunk) {
        const Index rows = std::min(chunk, n - t0);
        chunk_logits(hidden.middleRows(t0, rows), logits);
        if (options.return_logits && split) {
          slice_logits.middleRows(t0, rows) = logits;
        } else if (options.return_logits) {
          for (Index r = 0; r < rows; ++r) out.logits.row(slots[static_cast<std::size_t>(t0 + r)]) = logits.row(r);
        }
        if (stats_wanted) {
          const std::span<const TokenId> labels =
              targets.empty() ? std::span<const TokenId>{} : std::span<const TokenId>(targets).subspan(t0, rows);
          auto stats = detail::head_forward<Scalar>(logits, labels, options.temperature, num_threads(),
                                                    log_probs.data() + t0, entropy.data() + t0,
                                                    sum_pi_squared.data() + t0);
          if (options.keep_activations) statistics_.push_back(std::move(stats));
        }
        if (save_logits) saved_logits_.push_back(std::move(logits));
      }
    }
    if (split && options.return_logits) {
      const RowMatrix<Scalar> all = body_.sequence_parallel()->all_gather_rows(slice_logits);
      for (Index i = 0; i < slice.total; ++i) out.logits.row(slots[static_cast<std::size_t>(i)]) = all.row(i);
    }
    if (split && stats_wanted) {  // every rank's slice, in token order; the padding cut
      RowMatrix<Scalar> mine(n, 3);
      for (Index t = 0; t < n; ++t) {
        const auto at = static_cast<std::size_t>(t);
        mine.row(t) << (targets.empty() ? Scalar(0) : log_probs[at]), entropy[at], sum_pi_squared[at];
      }
      const RowMatrix<Scalar> all = body_.sequence_parallel()->all_gather_rows(mine);
      log_probs.resize(static_cast<std::size_t>(slice.total));
      entropy.resize(log_probs.size());
      sum_pi_squared.resize(log_probs.size());
      for (Index i = 0; i < slice.total; ++i) {
        const auto at = static_cast<std::size_t>(i);
        log_probs[at] = all(i, 0);
        entropy[at] = all(i, 1);
        sum_pi_squared[at] = all(i, 2);
      }
    }
    if (!targets.empty()) out.log_probs = batch.scatter<Scalar>(log_probs);
    if (options.return_entropy) out.entropy = batch.scatter<Scalar>(entropy);
    if (options.return_sum_pi_squared) out.sum_pi_squared = batch.scatter<Scalar>(sum_pi_squared);
    if (options.keep_activations) {
      saved_ = true;
      saved_targets_ = std::move(targets);
      if (split) {  // this slice's tokens; padding tokens (-1) take no cotangent
        saved_slots_.assign(static_cast<std::size_t>(n), -1);
        for (Index t = 0; t < slice.real_rows; ++t)
          saved_slots_[static_cast<std::size_t>(t)] = slots[static_cast<std::size_t>(slice.begin + t)];
      } else {
        saved_slots_.assign(slots.begin(), slots.end());
      }
      saved_layout_size_ = batch.layout_size();
      saved_temperature_ = options.temperature;
      saved_chunk_rows_ = chunk;
      saved_entropy_ = options.return_entropy;
    }
    return out;
  }

  void backward(const CausalLMCotangents<Scalar>& cotangents) {
    VERL_CHECK_ARG(saved_, "backward: no saved activations (call forward with keep_activations = true first)");
    const Index n = static_cast<Index>(saved_slots_.size()), vocab = vocab_size();
    const auto layout = static_cast<std::size_t>(saved_layout_size_);
    auto per_token = [&](std::span<const Scalar> values, std::string_view argument) {
      VERL_CHECK_ARG(values.empty() || values.size() == layout, "{}: expected {} values (rows * cols) or none, got {}",
                     argument, layout, values.size());
      std::vector<Scalar> out;
      if (values.empty()) return out;
      out.resize(static_cast<std::size_t>(n));
      for (Index t = 0; t < n; ++t) {
        const std::int64_t slot = saved_slots_[static_cast<std::size_t>(t)];
        out[static_cast<std::size_t>(t)] = slot < 0 ? Scalar(0) : values[static_cast<std::size_t>(slot)];
      }
      return out;
    };
    const std::vector<Scalar> grad_log_probs = per_token(cotangents.log_probs, "cotangents.log_probs");
    const std::vector<Scalar> grad_entropy = per_token(cotangents.entropy, "cotangents.entropy");
    VERL_CHECK_ARG(grad_log_probs.empty() || !saved_targets_.empty(),
                   "cotangents.log_probs: the forward pass computed no log-probs (no targets were given)");
    VERL_CHECK_ARG(grad_entropy.empty() || saved_entropy_,
                   "cotangents.entropy: the forward pass computed no entropy (return_entropy was false)");
    VERL_CHECK_ARG(cotangents.logits.empty() || cotangents.logits.size() == layout * static_cast<std::size_t>(vocab),
                   "cotangents.logits: expected {} values (rows * cols * vocab) or none, got {}",
                   layout * static_cast<std::size_t>(vocab), cotangents.logits.size());
    saved_ = false;  // the cotangents are valid: this forward pass is consumed
    body_.enable_grad();
    if (lm_head_.present()) lm_head_.enable_grad();
    RowMatrix<Scalar>& head_grad = lm_head_.present() ? lm_head_.grad : body_.weights().embed_tokens.grad;

    const RowMatrix<Scalar>& hidden = body_.hidden();
    RowMatrix<Scalar> d_hidden = RowMatrix<Scalar>::Zero(n, hidden.cols());
    const bool fused = !grad_log_probs.empty() || !grad_entropy.empty();
    if (fused || !cotangents.logits.empty()) {
      const Index chunk = saved_chunk_rows_;  // the forward pass's chunks (its statistics and saved logits)
      RowMatrix<Scalar> grad;
      for (Index t0 = 0, c = 0; t0 < n; t0 += chunk, ++c) {
        const Index rows = std::min(chunk, n - t0);
        if (fused) {
          if (static_cast<std::size_t>(c) < saved_logits_.size()) {
            grad.swap(saved_logits_[static_cast<std::size_t>(c)]);
          } else {
            chunk_logits(hidden.middleRows(t0, rows), grad);
          }
          auto slice = [&](const std::vector<Scalar>& v) {
            return v.empty() ? std::span<const Scalar>{} : std::span<const Scalar>(v).subspan(t0, rows);
          };
          const std::span<const TokenId> labels =
              saved_targets_.empty() ? std::span<const TokenId>{} : std::span<const TokenId>(saved_targets_).subspan(t0, rows);
          detail::head_backward<Scalar>(grad, labels, statistics_[static_cast<std::size_t>(c)], slice(grad_log_probs),
                                        slice(grad_entropy), saved_temperature_, num_threads());
        } else {
          grad.setZero(rows, vocab);
        }
        if (!cotangents.logits.empty()) {
          for (Index r = 0; r < rows; ++r) {
            const auto slot = saved_slots_[static_cast<std::size_t>(t0 + r)];
            if (slot < 0) continue;
            grad.row(r) += Eigen::Map<const RowMatrix<Scalar>>(cotangents.logits.data() + slot * vocab, 1, vocab);
          }
        }
        detail::linear_backward_input<Scalar>(body_.pool(), grad, head_weight(), d_hidden.middleRows(t0, rows), false);
        detail::linear_backward_weight<Scalar>(body_.pool(), grad, hidden.middleRows(t0, rows), head_grad, nullptr);
      }
    }
    statistics_.clear();
    saved_logits_.clear();
    body_.backward(d_hidden);
  }

  /// Strict: every parameter must be present with its shape, and nothing else (a tied model
  /// ignores an "lm_head.weight" entry, as transformers does).
  void load_state_dict(const StateDict& dict) {
    detail::load_state_dict(*this, dict, body_.config().tie_word_embeddings ? "lm_head.weight" : "");
  }

  /// Frees what a forward pass saved for backward (when no backward follows), and the memory kept
  /// for packing the weights of the next KV cache.
  void release_activations() {
    saved_ = false;
    statistics_.clear();
    saved_logits_.clear();
    packed_recycler_->release();
    body_.release_activations();
  }

  // ---- incremental decoding (rollout) --------------------------------------------------------

  /// The precision of the weights the next KV caches pack (TransformerOptions::decode_precision).
  [[nodiscard]] DecodePrecision decode_precision() const { return decode_precision_; }
  void set_decode_precision(DecodePrecision precision) { decode_precision_ = precision; }

  /// A cache for sequences of the given capacities (tokens each). A float model also packs its
  /// linear weights into the cache once (cpu::PackedMatrix), so that decode steps do not re-pack them;
  /// the model keeps that memory for its next cache (release_activations() frees it).
  [[nodiscard]] KvCache<Scalar> make_kv_cache(std::span<const Index> capacities) const {
    const auto& c = body_.config();
    KvCache<Scalar> cache(c.num_hidden_layers, c.num_key_value_heads * c.head_dim, capacities);
    if constexpr (std::same_as<Scalar, float>) cache.set_packed_weights(pack_weights());
    return cache;
  }

  /// Appends chunk i, tokens[chunk_offsets[i], chunk_offsets[i + 1]) at `positions`, to cache
  /// sequence sequences[i] (each token attends to the sequence's cached tokens and the chunk's
  /// earlier ones) and returns the logits of every chunk's last token, (sequences, V). Prefill is
  /// one call with whole prompts; a decode step one call with one token per sequence.
  RowMatrix<Scalar> extend(KvCache<Scalar>& cache, std::span<const Index> sequences, std::span<const TokenId> tokens,
                           std::span<const std::int64_t> chunk_offsets, std::span<const std::int64_t> positions) {
    const detail::PackedDecoderWeights* packed = nullptr;
    if constexpr (std::same_as<Scalar, float>) packed = cache.packed_weights();
    const RowMatrix<Scalar> last = body_.extend_layers(cache, sequences, tokens, chunk_offsets, positions,
                                                       decode_activations_, decode_cos_, decode_sin_, packed);
    RowMatrix<Scalar> normed;
    body_.final_norm(last, normed);
    RowMatrix<Scalar> logits;
    chunk_logits(normed, logits, packed != nullptr ? &packed->head : nullptr);
    return logits;
  }

  /// Every parameter tensor (the embedding once when tied).
  template <class Fn>
  void for_each_tensor(Fn&& fn) {
    DecoderWeights<Scalar>::for_each(body_.weights(), fn);
    if (lm_head_.present()) fn(lm_head_);
  }
  template <class Fn>
  void for_each_tensor(Fn&& fn) const {
    DecoderWeights<Scalar>::for_each(body_.weights(), fn);
    if (lm_head_.present()) fn(lm_head_);
  }

 private:
  void chunk_logits(const Eigen::Ref<const RowMatrix<Scalar>>& hidden, RowMatrix<Scalar>& logits,
                    const cpu::PackedMatrix* packed_head = nullptr) const {
    if (logits.rows() != hidden.rows() || logits.cols() != vocab_size()) {
      logits.resize(hidden.rows(), vocab_size());
      // A chunk's logits are tens of MiB, freshly allocated per chunk when they are saved for
      // backward: huge pages spare most of their first-touch faults. (Keeping the buffers for the
      // next step measured slower at 30M, 8 of 10 alternations: the product's stores land in pages
      // the kernel has just zeroed, still cached, where a reused buffer is read from memory first.)
      cpu::advise_huge_pages(logits.data(), static_cast<std::size_t>(logits.size()) * sizeof(Scalar));
    }
    detail::linear_forward<Scalar>(body_.pool(), hidden, head_weight(), nullptr, logits, packed_head);
  }

  /// Every linear weight packed for the float kernels (in parallel, one matrix per task), into the
  /// memory of the last cache's packing when no cache holds it any more.
  std::shared_ptr<const detail::PackedDecoderWeights> pack_weights() const {
    return body_.pack_weights(head_weight(), decode_precision_, *packed_recycler_);
  }

  DecoderBody<Scalar> body_;
  ParameterTensor<Scalar> lm_head_;

  // The last forward pass, for backward.
  bool saved_ = false;
  std::vector<detail::HeadStatistics<Scalar>> statistics_;
  std::vector<RowMatrix<Scalar>> saved_logits_;  ///< per chunk, when they fit max_saved_logits_bytes
  std::vector<TokenId> saved_targets_;
  std::vector<std::int64_t> saved_slots_;
  Index saved_layout_size_ = 0;
  float saved_temperature_ = 1.0f;
  Index saved_chunk_rows_ = 1;
  bool saved_entropy_ = false;

  // Scratch of the KV-cache path.
  DecodePrecision decode_precision_ = body_.options().decode_precision;
  std::shared_ptr<detail::PackedWeightsRecycler> packed_recycler_ = std::make_shared<detail::PackedWeightsRecycler>();
  detail::LayerActivations<Scalar> decode_activations_;
  RowMatrix<Scalar> decode_cos_, decode_sin_;
};

using Transformer = BasicTransformer<float>;

static_assert(CausalLM<Transformer>);
static_assert(CausalLM<BasicTransformer<double>>);

}  // namespace verl::model
