// The reference transformer under Megatron tensor parallelism: each rank of a TP communicator holds
// a shard of every split tensor and the ranks run the forward and backward passes together.
//   q/k/v, gate/up (and their biases): column-parallel, split by output features (dim 0);
//   o_proj, down_proj: row-parallel, split by input features (dim 1), their biases replicated and
//     added once after the partial products are summed;
//   attention heads split over the ranks, KV heads too: with fewer KV heads than ranks each KV head
//     is copied on size / num_key_value_heads ranks (as vLLM does when TP exceeds the KV heads),
//     and the copies' gradients are summed within those ranks so that the copies stay equal;
//   embedding and LM head (tied or not): vocabulary-parallel, rank r holding the token rows
//     [V r / size, V (r + 1) / size) (balanced: any vocabulary size, no padding);
//   RMSNorm weights replicated. Their inputs and the gradients reaching them are the same on every
//     rank (each f region all-reduces the input gradient before the norm's backward), so their
//     gradients are already equal and need no all-reduce (Megatron all-reduces them only under
//     sequence parallelism, as set_sequence_parallel does here, with the row-parallel biases).
//     Qwen3's per-head q_norm / k_norm are the exception: each rank sees only its heads, so their
//     gradients are summed over the ranks after backward.
// Log-probs and entropy come from the logits shards without gathering them
// (parallel::vocab_parallel_logprob_entropy).
//
// Every rank of the group must be given the same batch (Megatron's TP ranks share their data);
// forward checks that and says so. The model satisfies CausalLM: for_each_parameter and
// state_dict() visit this rank's shards (HF names, shard shapes); for_each_full_parameter,
// full_state_dict() and gather_dense() gather the full tensors (collective) for export.
// With one rank the model computes exactly what BasicTransformer does.
//
// Built with TensorParallelHead::none the model is a trunk without the LM head: forward_hidden
// and backward_hidden run the sharded body under a head its owner holds (the value model,
// tensor_parallel_critic.hpp); the LM-head calls refuse it by name.
//
// Generation (the 3D-HybridEngine, tg dividing the training tp): lend_to_generation() regroups the
// shards into a generation model over tg ranks by in-place all-gathers inside the plan's micro-DP
// groups (the training buffers grow into the generation buffers: no second copy), and
// take_back_from_generation() cuts them back. The model is also an IncrementalDecoder
// (make_kv_cache, extend): KV-cache decoding with this rank's heads and KV cache, the
// row-parallel sums, and the vocabulary-parallel logits gathered into whole rows for sampling.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/decoder.hpp"
#include "verl/model/transformer/kv_cache.hpp"
#include "verl/model/transformer/detail/parameter_module.hpp"
#include "verl/model/transformer/tensor_parallel_regions.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/model/transformer/weights.hpp"
#include "verl/parallel/communicator.hpp"
#include "verl/parallel/vocab_parallel.hpp"

namespace verl::model {

/// The slice of a full tensor one rank holds.
struct TensorParallelShard {
  int dim = -1;       ///< the torch dimension split over the ranks; -1: replicated (the whole tensor)
  Index offset = 0;   ///< the first index along dim this rank holds
  Index length = 0;   ///< how many indices along dim
  Index full = 0;     ///< the full tensor's extent along dim
  [[nodiscard]] bool replicated() const { return dim < 0; }
};

/// How a config's tensors are split over `size` ranks, and what rank `rank` holds.
struct TensorParallelPartition {
  int size = 1;
  int rank = 0;
  Index heads = 0;         ///< query heads per rank
  Index kv_heads = 0;      ///< key/value heads per rank (1 when copied)
  Index kv_replicas = 1;   ///< ranks holding the same key/value head (size / num_key_value_heads, or 1)
  Index intermediate = 0;  ///< MLP features per rank
  Index head_dim = 0;
  Index vocab_size = 0;    ///< the whole vocabulary
  /// Megatron's sequence parallelism: the replicated tensors applied to each rank's slice of the
  /// tokens (RMSNorm weights, row-parallel biases) take only that slice's share of the gradient.
  bool sequence_parallel = false;

  /// Throws verl::InvalidArgument naming the sizes when `size` does not divide the attention
  /// heads or the intermediate size, or when the KV heads are neither a multiple nor a divisor of
  /// `size`.
  static TensorParallelPartition of(const HfModelConfig& config, int size, int rank) {
    VERL_CHECK_ARG(size >= 1, "tensor-parallel size: expected a value >= 1, got {}", size);
    VERL_CHECK_ARG(rank >= 0 && rank < size, "tensor-parallel rank: expected a value in [0, {}), got {}", size, rank);
    const Index heads = config.num_attention_heads, kv = config.num_key_value_heads;
    VERL_CHECK_ARG(heads % size == 0,
                   "tensor-parallel size: expected a divisor of num_attention_heads = {} (the heads are split over "
                   "the ranks), got {}",
                   heads, size);
    VERL_CHECK_ARG(kv % size == 0 || size % kv == 0,
                   "tensor-parallel size: expected a divisor or a multiple of num_key_value_heads = {} (KV heads are "
                   "split over the ranks, or each copied on size / num_key_value_heads ranks), got {}",
                   kv, size);
    VERL_CHECK_ARG(config.intermediate_size % size == 0,
                   "tensor-parallel size: expected a divisor of intermediate_size = {} (gate/up/down are split over "
                   "the ranks), got {}",
                   config.intermediate_size, size);
    VERL_CHECK_ARG(config.vocab_size >= size,
                   "tensor-parallel size: expected at most vocab_size = {} ranks (each holds some vocabulary rows), "
                   "got {}",
                   config.vocab_size, size);
    TensorParallelPartition p;
    p.size = size;
    p.rank = rank;
    p.heads = heads / size;
    p.kv_heads = kv >= size ? kv / size : 1;
    p.kv_replicas = kv >= size ? 1 : size / kv;
    p.intermediate = config.intermediate_size / size;
    p.head_dim = config.head_dim;
    p.vocab_size = config.vocab_size;
    return p;
  }

  [[nodiscard]] Index vocab_begin(int r) const { return vocab_size * r / size; }
  [[nodiscard]] Index vocab_rows(int r) const { return vocab_begin(r + 1) - vocab_begin(r); }
  /// The first key/value head rank r holds.
  [[nodiscard]] Index first_kv_head(int r) const { return kv_replicas > 1 ? r / kv_replicas : r * kv_heads; }

  /// The config of this rank's DecoderBody: its heads, MLP features and vocabulary rows.
  [[nodiscard]] HfModelConfig local_config(HfModelConfig config) const {
    config.num_attention_heads = heads;
    config.num_key_value_heads = kv_heads;
    config.intermediate_size = intermediate;
    config.vocab_size = vocab_rows(rank);
    return config;
  }

  /// What rank r holds of the full tensor `name` (a Hugging Face parameter name).
  [[nodiscard]] TensorParallelShard shard(std::string_view name, int r) const {
    const auto is = [&](std::string_view module, bool weight_only = false) {
      return name.ends_with(std::string(module) + ".weight") || (!weight_only && name.ends_with(std::string(module) + ".bias"));
    };
    const Index d = head_dim;
    if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
      return {0, vocab_begin(r), vocab_rows(r), vocab_size};
    }
    if (is("self_attn.q_proj")) return {0, r * heads * d, heads * d, size * heads * d};
    if (is("self_attn.k_proj") || is("self_attn.v_proj")) {
      return {0, first_kv_head(r) * d, kv_heads * d, kv_heads * size / kv_replicas * d};
    }
    if (is("self_attn.o_proj", true)) return {1, r * heads * d, heads * d, size * heads * d};
    if (is("mlp.gate_proj") || is("mlp.up_proj")) return {0, r * intermediate, intermediate, size * intermediate};
    if (is("mlp.down_proj", true)) return {1, r * intermediate, intermediate, size * intermediate};
    return {};  // norms, o_proj and down_proj biases
  }

  /// Whether a backward pass leaves only this rank's share of `name`'s gradient: the copies of a
  /// KV head (summed over the copies), the per-head q/k norms (summed over all ranks), and under
  /// sequence parallelism the tensors applied to the token slices (summed over all ranks, as
  /// Megatron all-reduces its sequence-parallel parameters' gradients).
  enum class PartialGradient : std::uint8_t { none, kv_replicas, all_ranks };
  [[nodiscard]] PartialGradient partial_gradient(std::string_view name) const {
    if (size > 1 && (name.ends_with("self_attn.q_norm.weight") || name.ends_with("self_attn.k_norm.weight"))) {
      return PartialGradient::all_ranks;
    }
    if (size > 1 && sequence_parallel &&
        (name.ends_with("input_layernorm.weight") || name.ends_with("post_attention_layernorm.weight") ||
         name == "model.norm.weight" || name.ends_with("self_attn.o_proj.bias") || name.ends_with("mlp.down_proj.bias"))) {
      return PartialGradient::all_ranks;
    }
    if (kv_replicas > 1 && (name.find("self_attn.k_proj.") != std::string_view::npos ||
                            name.find("self_attn.v_proj.") != std::string_view::npos)) {
      return PartialGradient::kv_replicas;
    }
    return PartialGradient::none;
  }
};

/// The bytes of parameter buffers one rank holds, changed by every allocation, growth, shrink
/// and release the 3D-HybridEngine's reshard makes, as it makes them; peak() is the most held at
/// once. (Gradient buffers, optimizer moments, KV caches and packed decode copies are not
/// parameter buffers and are not counted.)
class ParameterMemoryMeter {
 public:
  /// Starts from `bytes` already held.
  void start(std::int64_t bytes) { current_ = peak_ = bytes; }
  /// A buffer went from `before` to `after` bytes.
  void resized(std::int64_t before, std::int64_t after) {
    current_ += after - before;
    peak_ = std::max(peak_, current_);
  }
  [[nodiscard]] std::int64_t current() const { return current_; }
  [[nodiscard]] std::int64_t peak() const { return peak_; }

 private:
  std::int64_t current_ = 0, peak_ = 0;
};

namespace detail {

/// A shard as a block of the full tensor's storage (rank-1 tensors are stored as one row).
struct ShardBlock {
  Index row = 0, col = 0, rows = 0, cols = 0;
};

inline ShardBlock shard_block(const TensorParallelShard& shard, std::span<const std::int64_t> full_shape) {
  const Index rows = full_shape.size() == 2 ? full_shape[0] : 1, cols = full_shape.back();
  if (shard.replicated()) return {0, 0, rows, cols};
  if (full_shape.size() == 2 && shard.dim == 0) return {shard.offset, 0, shard.length, cols};
  return {0, shard.offset, rows, shard.length};
}

/// Transposes, in place, an (a, b) row-major matrix whose items are runs of `item` scalars into
/// (b, a), following the permutation's cycles (scratch: one item and a bit per item).
template <class Scalar>
void transpose_items_in_place(Scalar* data, Index a, Index b, Index item) {
  const Index n = a * b;
  if (a <= 1 || b <= 1) return;
  std::vector<bool> done(static_cast<std::size_t>(n), false);
  std::vector<Scalar> carried(static_cast<std::size_t>(item)), swap(static_cast<std::size_t>(item));
  // item p = (i, j) at i * b + j goes to (j, i) at j * a + i.
  const auto target = [&](Index p) { return (p % b) * a + p / b; };
  for (Index start = 0; start < n; ++start) {
    if (done[static_cast<std::size_t>(start)]) continue;
    std::copy_n(data + start * item, item, carried.data());
    Index p = start;
    do {
      const Index q = target(p);
      std::copy_n(data + q * item, item, swap.data());
      std::copy_n(carried.data(), item, data + q * item);
      carried.swap(swap);
      done[static_cast<std::size_t>(p)] = true;
      p = q;
    } while (p != start);
  }
}

/// The communicator of a tensor-parallel group, and the hook its DecoderBody calls.
template <class Scalar, parallel::Communicator Comm>
class TensorParallelGroup final : public TensorParallelRegions<Scalar> {
 public:
  TensorParallelGroup(Comm tp, const TensorParallelPartition& partition) : tp_(std::move(tp)), partition_(partition) {
    // Collective on every rank alike (the partition is the same everywhere).
    if (partition_.kv_replicas > 1) {
      kv_replicas_.emplace(tp_.split(static_cast<int>(partition_.first_kv_head(tp_.rank())), tp_.rank()));
    }
  }

  void all_reduce_sum(RowMatrix<Scalar>& partial) override { sum(tp_, partial); }
  [[nodiscard]] int size() const override { return tp_.size(); }
  [[nodiscard]] int rank() const override { return tp_.rank(); }
  void reduce_scatter_rows(const RowMatrix<Scalar>& partial, RowMatrix<Scalar>& slice) override {
    const int ranks = tp_.size();
    VERL_CHECK_ARG(partial.rows() % ranks == 0,
                   "reduce_scatter_rows: expected a number of rows divisible by the {} tensor-parallel ranks, got {}", ranks,
                   partial.rows());
    slice.resize(partial.rows() / ranks, partial.cols());
    tp_.reduce_scatter(std::span<const Scalar>(partial.data(), static_cast<std::size_t>(partial.size())),
                       std::span<Scalar>(slice.data(), static_cast<std::size_t>(slice.size())), parallel::ReduceOp::sum);
  }
  void all_gather_rows(const RowMatrix<Scalar>& slice, RowMatrix<Scalar>& whole) override {
    whole.resize(slice.rows() * tp_.size(), slice.cols());
    tp_.all_gather(std::span<const Scalar>(slice.data(), static_cast<std::size_t>(slice.size())),
                   std::span<Scalar>(whole.data(), static_cast<std::size_t>(whole.size())));
  }
  [[nodiscard]] Index vocab_begin() const override { return partition_.vocab_begin(partition_.rank); }
  [[nodiscard]] Index vocab_size() const override { return partition_.vocab_size; }

  Comm& communicator() { return tp_; }
  void sum_partial_gradient(TensorParallelPartition::PartialGradient kind, RowMatrix<Scalar>& grad) {
    if (kind == TensorParallelPartition::PartialGradient::all_ranks) sum(tp_, grad);
    if (kind == TensorParallelPartition::PartialGradient::kv_replicas) sum(*kv_replicas_, grad);
  }

 private:
  static void sum(Comm& comm, RowMatrix<Scalar>& x) {
    if (comm.size() > 1) comm.all_reduce(std::span<Scalar>(x.data(), static_cast<std::size_t>(x.size())), parallel::ReduceOp::sum);
  }

  Comm tp_;
  TensorParallelPartition partition_;
  std::optional<Comm> kv_replicas_;
};

}  // namespace detail

/// Megatron's even split of the layers over `stages` pipeline stages: stage s holds layers
/// [s L / stages, (s + 1) L / stages), the embedding on the first stage, the final norm and the LM
/// head on the last. Throws verl::InvalidArgument when `stages` does not divide the layers, and
/// for tied embeddings over several stages (their gradient would have to be summed between the
/// first and the last stage's copies: not built).
/// `lm_head` false: a model without the LM head (a value model's trunk), where tied embeddings
/// tie nothing across the stages.
inline PipelineStageLayers pipeline_stage_layers(const HfModelConfig& config, int stage, int stages, bool lm_head = true) {
  VERL_CHECK_ARG(stages >= 1 && stage >= 0 && stage < stages,
                 "pipeline stage: expected a stage in [0, {}) of {} >= 1 stages, got {}", stages, stages, stage);
  if (stages == 1) return {};
  VERL_CHECK_ARG(config.num_hidden_layers % stages == 0,
                 "pipeline stages: expected a divisor of num_hidden_layers = {} (Megatron's even split), got {}",
                 config.num_hidden_layers, stages);
  VERL_CHECK_ARG(!lm_head || !config.tie_word_embeddings,
                 "pipeline stages: tie_word_embeddings = true with {} stages is not supported (the embedding on the "
                 "first stage and the LM head on the last would be copies whose gradients are summed between the "
                 "stages); expected 1 stage",
                 stages);
  const Index per_stage = config.num_hidden_layers / stages;
  return {.first_layer = per_stage * stage, .layers = per_stage, .embeds = stage == 0, .final_norm = stage == stages - 1};
}

/// Which pipeline stage holds the Hugging Face parameter `name` (pipeline_stage_layers' split).
inline int pipeline_stage_of(const HfModelConfig& config, int stages, std::string_view name) {
  if (stages == 1 || name == "model.embed_tokens.weight") return 0;
  if (name == "model.norm.weight" || name == "lm_head.weight") return stages - 1;
  constexpr std::string_view prefix = "model.layers.";
  VERL_CHECK_ARG(name.starts_with(prefix), "pipeline stages: parameter '{}' is not a layer, the embedding, the final norm "
                 "or the LM head", name);
  Index layer = 0;
  for (std::size_t i = prefix.size(); i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) layer = layer * 10 + (name[i] - '0');
  return static_cast<int>(layer / (config.num_hidden_layers / stages));
}

/// What sits on a tensor-parallel model's final hidden states: the vocabulary-parallel LM head (a
/// policy), or nothing (a trunk under its owner's own head: BasicTensorParallelCritic's value head).
enum class TensorParallelHead : std::uint8_t { lm_head, none };

template <class Scalar, parallel::Communicator Comm>
class BasicTensorParallelTransformer
    : public detail::ParameterModule<BasicTensorParallelTransformer<Scalar, Comm>, Scalar> {
 public:
  using scalar_type = Scalar;
  using communicator_type = Comm;

  /// This rank's shard, zero-initialized, for `config` over the ranks of `tp`. Collective: with
  /// fewer KV heads than ranks it splits `tp` into the groups of each KV head's copies.
  /// Under pipeline parallelism `stage` (pipeline_stage_layers) says which layers this rank's
  /// stage holds: the embedding only on the first stage, the final norm and LM head on the last.
  /// `head` none: a trunk without the LM head (forward_hidden / backward_hidden only).
  BasicTensorParallelTransformer(HfModelConfig config, Comm tp, const TransformerOptions& options = {},
                                 PipelineStageLayers stage = {}, TensorParallelHead head = TensorParallelHead::lm_head)
      : config_(std::move(config)),
        partition_(TensorParallelPartition::of(config_, tp.size(), tp.rank())),
        body_(make_body(partition_.local_config(config_), options, stage, head == TensorParallelHead::lm_head)),
        group_(std::make_unique<detail::TensorParallelGroup<Scalar, Comm>>(std::move(tp), partition_)),
        head_(head) {
    body_.set_tensor_parallel(group_.get());
    if (head_ == TensorParallelHead::lm_head && !config_.tie_word_embeddings && stage.final_norm) {
      lm_head_ = ParameterTensor<Scalar>::matrix("lm_head.weight", partition_.vocab_rows(partition_.rank),
                                                 config_.hidden_size);
    }
  }

  /// This rank's shard of `dense`'s weights (its options too), of `stage`'s layers. Collective, as above.
  BasicTensorParallelTransformer(const BasicTransformer<Scalar>& dense, Comm tp, PipelineStageLayers stage = {})
      : BasicTensorParallelTransformer(dense.config(), std::move(tp), dense.body().options(), stage) {
    copy_shards_of(dense);
  }

  /// Sets this rank's shard of every tensor from the full tensor of the same name in `dense` (a
  /// model of ParameterTensors visited by for_each_tensor: a BasicTransformer, or a value model
  /// whose head tensors this trunk does not hold). Throws naming a tensor `dense` lacks.
  template <class Dense>
  void copy_shards_of(const Dense& dense) {
    std::map<std::string_view, const ParameterTensor<Scalar>*> full;
    dense.for_each_tensor([&](const ParameterTensor<Scalar>& t) { full.emplace(t.name, &t); });
    for_each_tensor([&](ParameterTensor<Scalar>& t) {
      const auto found = full.find(t.name);
      VERL_CHECK_ARG(found != full.end(), "copy_shards_of: the dense model has no tensor '{}' (shape {})", t.name,
                     detail::shape_string(full_shape(t)));
      copy_shard(t, found->second->shape, found->second->value.data());
    });
  }

  // ---- the 3D-HybridEngine: the generation layout (tp -> tg, tg dividing tp) -------------------

  /// Lends this rank's training shards to a generation model of tg = generation_tp.size() ranks
  /// (HybridFlow's 3D-HybridEngine, pg = 1): the t/tg ranks of `micro_dp` (the plan's micro-DP
  /// group: training tp ranks g (t/tg) .. (g + 1)(t/tg) - 1 for generation tp rank g, ordered by
  /// training tp rank) all-gather their shards into generation shards, and the generation model
  /// runs TP-sharded over `generation_tp`. Each training buffer is grown in place into the
  /// generation buffer (Eigen's conservativeResize of a row-major matrix over its rows: a
  /// realloc), its own block moved to its slot, and the other members' blocks gathered into the
  /// rest (all_gather_v_in_place): the training shard lives inside the generation buffer, no
  /// second copy exists (zero redundancy). Column-split tensors (o_proj, down_proj, rank-1
  /// biases) are gathered as blocks and transposed in place into rows. Replicated tensors (norms,
  /// row-parallel biases) move over as they are; with fewer KV heads than ranks a KV head's copies
  /// contribute once (only the first copy sends). `meter` counts every buffer change.
  /// Until take_back_from_generation() this model holds no weights and refuses to compute.
  /// Collective over micro_dp and generation_tp. `misplace_blocks` is a testing hook: k > 0
  /// rotates the gathered blocks by k slots (a wrong shard assignment, which must be caught).
  [[nodiscard]] BasicTensorParallelTransformer lend_to_generation(Comm& micro_dp, Comm generation_tp,
                                                                  ParameterMemoryMeter& meter, int misplace_blocks = 0)
    requires parallel::GathersInPlace<Comm>
  {
    require_weights("lend_to_generation");
    require_whole_model("lend_to_generation");
    require_lm_head("lend_to_generation");
    const int kt = micro_dp.size(), tg = generation_tp.size(), j = micro_dp.rank(), g = generation_tp.rank();
    VERL_CHECK_ARG(kt * tg == partition_.size,
                   "lend_to_generation: generation tensor-parallel size {} times the micro-DP group's {} ranks: expected "
                   "the training tensor-parallel size {} (tg must divide tp)",
                   tg, kt, partition_.size);
    VERL_CHECK_ARG(g * kt + j == partition_.rank,
                   "lend_to_generation: training tp rank {} holds block {} of {}: the plan puts it at generation tp rank "
                   "{} and micro-DP rank {} (micro-DP groups of consecutive training tp ranks), got generation tp rank {} "
                   "and micro-DP rank {}",
                   partition_.rank, partition_.rank, partition_.size, partition_.rank / kt, partition_.rank % kt, g, j);
    const TensorParallelPartition generation = TensorParallelPartition::of(config_, tg, g);
    std::int64_t held = 0;
    for_each_tensor([&](const ParameterTensor<Scalar>& t) { held += bytes_of(t.value); });
    meter.start(held);
    DecoderWeights<Scalar> weights = body_.take_weights();
    ParameterTensor<Scalar> head = std::exchange(lm_head_, ParameterTensor<Scalar>{});
    lent_ = true;
    auto grow = [&](ParameterTensor<Scalar>& t) { grow_into_generation(t, generation, micro_dp, meter, misplace_blocks); };
    DecoderWeights<Scalar>::for_each(weights, grow);
    if (head.present()) grow(head);
    return BasicTensorParallelTransformer(AdoptWeights{}, config_, std::move(generation_tp), body_.options(),
                                          std::move(weights), std::move(head), body_.shared_pool());
  }

  /// Takes this model's weights back from the generation model lend_to_generation() made: each
  /// generation buffer is cut back in place to this rank's training block (the inverse moves,
  /// then a shrinking realloc) and the generation model is left empty (dropped by the caller).
  /// No communication. The training weights are bit for bit those lent.
  void take_back_from_generation(BasicTensorParallelTransformer& generation, ParameterMemoryMeter& meter) {
    VERL_CHECK_ARG(lent_, "take_back_from_generation: this model's weights are not lent");
    generation.require_weights("take_back_from_generation (the generation model)");
    VERL_CHECK_ARG(partition_.size % generation.partition_.size == 0,
                   "take_back_from_generation: the generation model's tensor-parallel size {} does not divide this "
                   "model's {}",
                   generation.partition_.size, partition_.size);
    DecoderWeights<Scalar> weights = generation.body_.take_weights();
    ParameterTensor<Scalar> head = std::exchange(generation.lm_head_, ParameterTensor<Scalar>{});
    generation.lent_ = true;
    auto shrink = [&](ParameterTensor<Scalar>& t) { shrink_to_training(t, generation.partition_, meter); };
    DecoderWeights<Scalar>::for_each(weights, shrink);
    if (head.present()) shrink(head);
    body_.restore_weights(std::move(weights));
    lm_head_ = std::move(head);
    lent_ = false;
  }

  /// True while the weights are lent to a generation model.
  [[nodiscard]] bool lent() const { return lent_; }

  // ---- incremental decoding (rollout), TP-sharded ---------------------------------------------

  /// The precision of the weights the next KV caches pack (as BasicTransformer's).
  [[nodiscard]] DecodePrecision decode_precision() const { return decode_precision_; }
  void set_decode_precision(DecodePrecision precision) { decode_precision_ = precision; }

  /// A cache of this rank's key/value heads for sequences of the given capacities; a float model
  /// packs its linear shards into it, as BasicTransformer does.
  [[nodiscard]] KvCache<Scalar> make_kv_cache(std::span<const Index> capacities) const {
    require_lm_head("make_kv_cache");
    const auto& c = body_.config();
    KvCache<Scalar> cache(c.num_hidden_layers, c.num_key_value_heads * c.head_dim, capacities);
    if constexpr (std::same_as<Scalar, float>) {
      cache.set_packed_weights(body_.pack_weights(head_weight(), decode_precision_, *packed_recycler_));
    }
    return cache;
  }

  /// BasicTransformer::extend over the shards, collective: every rank of the group passes the same
  /// chunks. Attention runs over this rank's heads and KV cache, o_proj and down_proj sum their
  /// partial products over the ranks, and the vocabulary-parallel head's logits rows are gathered
  /// (all_gather_v of each rank's columns), so that every rank samples from the whole row, as the
  /// dense model does: the same seed gives the same tokens (the logits differ from the dense
  /// model's only by the summation order of the row-parallel products).
  RowMatrix<Scalar> extend(KvCache<Scalar>& cache, std::span<const Index> sequences, std::span<const TokenId> tokens,
                           std::span<const std::int64_t> chunk_offsets, std::span<const std::int64_t> positions) {
    require_weights("extend");
    require_whole_model("extend");
    require_lm_head("extend");
    require_same_batch_tokens(tokens);
    const detail::PackedDecoderWeights* packed = nullptr;
    if constexpr (std::same_as<Scalar, float>) packed = cache.packed_weights();
    const RowMatrix<Scalar> last = body_.extend_layers(cache, sequences, tokens, chunk_offsets, positions,
                                                       decode_activations_, decode_cos_, decode_sin_, packed);
    RowMatrix<Scalar> normed;
    body_.final_norm(last, normed);
    RowMatrix<Scalar> local(normed.rows(), head_weight().rows());
    detail::linear_forward<Scalar>(body_.pool(), normed, head_weight(), nullptr, local,
                                   packed != nullptr ? &packed->head : nullptr);
    return gather_vocabulary(local);
  }

  [[nodiscard]] const HfModelConfig& config() const { return config_; }
  [[nodiscard]] Index vocab_size() const { return config_.vocab_size; }
  [[nodiscard]] Index context_length() const { return config_.max_position_embeddings; }
  [[nodiscard]] const TensorParallelPartition& partition() const { return partition_; }
  [[nodiscard]] int tp_rank() const { return partition_.rank; }
  [[nodiscard]] int tp_size() const { return partition_.size; }

  /// Megatron's sequence parallelism (its `sequence_parallel`, see DecoderBody) for the next
  /// training and log-prob passes: the same results as without it up to the order of sums.
  /// It acts with more than one rank only; generation (extend, lend_to_generation) never splits
  /// the tokens. A pipeline stage then takes and returns this rank's slice of the tokens
  /// (forward_stage).
  void set_sequence_parallel(bool on) {
    body_.set_megatron_sequence_parallel(on);
    partition_.sequence_parallel = on;
  }
  [[nodiscard]] bool sequence_parallel() const { return partition_.sequence_parallel; }
  [[nodiscard]] Comm& communicator() { return group_->communicator(); }
  /// This rank's body (its config holds this rank's heads, MLP features and vocabulary rows).
  [[nodiscard]] const DecoderBody<Scalar>& body() const { return body_; }
  /// What this rank holds of the parameter `name`.
  [[nodiscard]] TensorParallelShard shard_of(std::string_view name) const { return partition_.shard(name, partition_.rank); }
  /// The layers this rank's pipeline stage holds (the whole model without pipeline parallelism).
  [[nodiscard]] const PipelineStageLayers& pipeline_stage() const { return body_.pipeline_stage(); }
  [[nodiscard]] bool first_stage() const { return pipeline_stage().embeds; }
  [[nodiscard]] bool last_stage() const { return pipeline_stage().final_norm; }

  // ---- pipeline stages (Megatron's pipeline parallelism) ---------------------------------------

  /// A stage before the last: its layers over the batch, from the previous stage's activations
  /// `input` ((N, H), none on the first stage, which embeds the tokens); returns the (N, H)
  /// activations for the next stage (valid until the next pass). Under sequence parallelism both
  /// are this rank's slice of the tokens ((sequence_slice_rows(N, tp), H)). Collective over the TP group.
  const RowMatrix<Scalar>& forward_stage(const TokenBatch& batch, const RowMatrix<Scalar>* input, bool keep_activations) {
    require_weights("forward_stage");
    VERL_CHECK_ARG(!last_stage(), "forward_stage: the last pipeline stage computes the head: call forward");
    require_same_batch(batch);
    saved_ = false;
    const RowMatrix<Scalar>& out = body_.forward(batch, keep_activations, input);
    saved_ = keep_activations;
    return out;
  }

  /// A stage before the last: accumulates its parameters' gradients from the gradient of its
  /// output activations (`d_output`, overwritten); stage_input_gradient() is then what the
  /// previous stage receives (none on the first stage). Collective over the TP group.
  void backward_stage(RowMatrix<Scalar>& d_output) {
    VERL_CHECK_ARG(saved_, "backward_stage: no saved activations (call forward_stage with keep_activations = true first)");
    VERL_CHECK_ARG(!last_stage(), "backward_stage: the last pipeline stage starts from its loss: call backward");
    saved_ = false;
    body_.enable_grad();
    body_backward(d_output);
  }

  /// A stage before the last under 1F1B keeps several forward passes for their backward: the
  /// last forward_stage's saved state moved out, and put back before its backward_stage.
  [[nodiscard]] typename DecoderBody<Scalar>::SavedPass take_saved_pass() {
    VERL_CHECK_ARG(saved_, "take_saved_pass: no saved activations (call forward_stage with keep_activations = true first)");
    saved_ = false;
    return body_.take_saved_pass();
  }
  void restore_saved_pass(typename DecoderBody<Scalar>::SavedPass pass) {
    VERL_CHECK_ARG(pass.saved, "restore_saved_pass: the pass holds no saved activations");
    body_.restore_saved_pass(std::move(pass));
    saved_ = true;
  }

  /// The gradient of the last backward pass's stage input (a stage after the first).
  [[nodiscard]] const RowMatrix<Scalar>& stage_input_gradient() const { return body_.stage_input_gradient(); }

  // ---- the trunk under a head of its owner's (a value head) -----------------------------------

  /// The final hidden states (after the last norm) of the batch's valid tokens, (N, H), whole and
  /// the same on every rank (the row-parallel sums are all-reduced; under sequence parallelism
  /// the normed slices are all-gathered); valid until the next pass. Collective over the TP group,
  /// every rank with the same batch. A head on them that every rank holds whole (replicated)
  /// computes the same outputs and the same gradient d(hidden) everywhere.
  /// The last of several pipeline stages starts from the previous stage's activations
  /// `stage_input` (as forward_stage's `input`).
  const RowMatrix<Scalar>& forward_hidden(const TokenBatch& batch, bool keep_activations,
                                          const RowMatrix<Scalar>* stage_input = nullptr) {
    require_weights("forward_hidden");
    VERL_CHECK_ARG(last_stage(), "forward_hidden: a pipeline stage before the last has no final norm: call forward_stage");
    require_same_batch(batch);
    saved_ = false;
    const RowMatrix<Scalar>& hidden = body_.forward(batch, keep_activations, stage_input);
    saved_ = keep_activations;
    return hidden;
  }

  /// Accumulates the body's gradients from `d_hidden` (N, H, overwritten): the whole gradient of
  /// forward_hidden's output, the same on every rank (a replicated head's). Under sequence
  /// parallelism the body reduce-scatters partial gradients over the token slices, so each rank
  /// keeps only its own slice's rows (the others zero): their sum is the whole gradient, exactly.
  /// Collective over the TP group.
  void backward_hidden(RowMatrix<Scalar>& d_hidden) {
    VERL_CHECK_ARG(saved_, "backward_hidden: no saved activations (call forward_hidden with keep_activations = true first)");
    saved_ = false;
    if (body_.tokens_split()) {
      // A slice may begin past the last token (only padding: fewer tokens than ranks' rows).
      const SequenceSlice& slice = body_.sequence_slice();
      const Index begin = std::min(slice.begin, d_hidden.rows()), end = std::min(begin + slice.real_rows, d_hidden.rows());
      d_hidden.topRows(begin).setZero();
      d_hidden.bottomRows(d_hidden.rows() - end).setZero();
    }
    body_.enable_grad();
    body_backward(d_hidden);
  }
  /// The last forward_hidden's output.
  [[nodiscard]] const RowMatrix<Scalar>& hidden() const { return body_.hidden(); }
  [[nodiscard]] TensorParallelHead head() const { return head_; }

  // ---- CausalLM ------------------------------------------------------------------------------

  /// Collective: every rank of the group passes the same batch and options. The last of several
  /// pipeline stages starts from the previous stage's activations `stage_input` ((N, H)).
  CausalLMOutput<Scalar> forward(const TokenBatch& batch, const ForwardOptions& options,
                                 const RowMatrix<Scalar>* stage_input = nullptr) {
    VERL_CHECK_ARG(std::isfinite(options.temperature) && options.temperature > 0,
                   "temperature: expected a finite value > 0, got {}", options.temperature);
    require_weights("forward");
    VERL_CHECK_ARG(last_stage(), "forward: a pipeline stage before the last has no head: call forward_stage");
    require_lm_head("forward");
    require_same_batch(batch);
    std::vector<TokenId> targets;
    if (!options.targets.empty()) {
      targets = batch.gather(options.targets, "targets");
      body_.require_tokens(targets, "targets");
    }
    saved_ = false;
    const RowMatrix<Scalar>& hidden = body_.forward(batch, options.keep_activations, stage_input);
    const Index n = hidden.rows(), local_vocab = head_weight().rows();
    const bool stats_wanted = !targets.empty() || options.return_entropy || options.return_sum_pi_squared;

    CausalLMOutput<Scalar> out;
    if (options.return_logits) out.logits = RowMatrix<Scalar>::Zero(batch.layout_size(), vocab_size());
    std::vector<Scalar> log_probs(stats_wanted ? static_cast<std::size_t>(n) : 0);
    std::vector<Scalar> entropy(log_probs.size()), sum_pi_squared(log_probs.size());
    release_head();
    const auto slots = batch.slots();
    const Index chunk = detail::lm_head_chunk_rows(local_vocab);
    const bool save_logits = options.keep_activations && stats_wanted &&
                             static_cast<double>(n) * static_cast<double>(local_vocab) * sizeof(Scalar) <=
                                 static_cast<double>(body_.options().max_saved_logits_bytes);
    // Every rank has the same n, hence the same chunks and collectives.
    if (options.return_logits || stats_wanted) {
      RowMatrix<Scalar> logits;
      for (Index t0 = 0; t0 < n; t0 += chunk) {
        const Index rows = std::min(chunk, n - t0);
        chunk_logits(hidden.middleRows(t0, rows), logits);
        if (options.return_logits) {
          const RowMatrix<Scalar> full = gather_vocabulary(logits);
          for (Index r = 0; r < rows; ++r) out.logits.row(slots[static_cast<std::size_t>(t0 + r)]) = full.row(r);
        }
        if (stats_wanted) {
          const std::span<const TokenId> labels =
              targets.empty() ? std::span<const TokenId>{} : std::span<const TokenId>(targets).subspan(t0, rows);
          head_forward(logits, labels, options.temperature, log_probs.data() + t0, entropy.data() + t0,
                       sum_pi_squared.data() + t0, options.keep_activations);
        }
        if (save_logits) saved_logits_.push_back(std::move(logits));
      }
    }
    if (!targets.empty()) out.log_probs = batch.scatter<Scalar>(log_probs);
    if (options.return_entropy) out.entropy = batch.scatter<Scalar>(entropy);
    if (options.return_sum_pi_squared) out.sum_pi_squared = batch.scatter<Scalar>(sum_pi_squared);
    if (options.keep_activations) {
      saved_ = true;
      saved_targets_ = std::move(targets);
      saved_slots_.assign(slots.begin(), slots.end());
      saved_layout_size_ = batch.layout_size();
      saved_temperature_ = options.temperature;
      saved_entropy_ = options.return_entropy;
    }
    return out;
  }

  /// Collective. Accumulates the gradients of this rank's shards; `cotangents` are the same on
  /// every rank (logits cotangents over the whole vocabulary, of which each rank reads its columns).
  void backward(const CausalLMCotangents<Scalar>& cotangents) {
    require_lm_head("backward");
    VERL_CHECK_ARG(saved_, "backward: no saved activations (call forward with keep_activations = true first)");
    const Index n = static_cast<Index>(saved_slots_.size()), vocab = vocab_size();
    const auto layout = static_cast<std::size_t>(saved_layout_size_);
    auto per_token = [&](std::span<const Scalar> values, std::string_view argument) {
      VERL_CHECK_ARG(values.empty() || values.size() == layout, "{}: expected {} values (rows * cols) or none, got {}",
                     argument, layout, values.size());
      std::vector<Scalar> out;
      if (values.empty()) return out;
      out.resize(static_cast<std::size_t>(n));
      for (Index t = 0; t < n; ++t) out[static_cast<std::size_t>(t)] = values[static_cast<std::size_t>(saved_slots_[static_cast<std::size_t>(t)])];
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
    const Index local_vocab = head_weight().rows(), vocab_begin = partition_.vocab_begin(partition_.rank);
    RowMatrix<Scalar> d_hidden = RowMatrix<Scalar>::Zero(n, hidden.cols());
    // Every rank takes the same branches (the cotangents are the same everywhere).
    const bool fused = !grad_log_probs.empty() || !grad_entropy.empty();
    if (fused || !cotangents.logits.empty()) {
      const Index chunk = detail::lm_head_chunk_rows(local_vocab);
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
          head_backward(grad, labels, static_cast<std::size_t>(c), slice(grad_log_probs), slice(grad_entropy));
        } else {
          grad.setZero(rows, local_vocab);
        }
        if (!cotangents.logits.empty()) {
          for (Index r = 0; r < rows; ++r) {
            const auto slot = saved_slots_[static_cast<std::size_t>(t0 + r)];
            grad.row(r) += Eigen::Map<const RowMatrix<Scalar>>(cotangents.logits.data() + slot * vocab + vocab_begin, 1,
                                                               local_vocab);
          }
        }
        detail::linear_backward_input<Scalar>(body_.pool(), grad, head_weight(), d_hidden.middleRows(t0, rows), false);
        detail::linear_backward_weight<Scalar>(body_.pool(), grad, hidden.middleRows(t0, rows), head_grad, nullptr);
      }
    }
    release_head();
    // The LM head is column-parallel over a replicated input: sum the input gradient (f); under
    // sequence parallelism the body reduce-scatters it over the tokens instead.
    if (!body_.tokens_split()) group_->all_reduce_sum(d_hidden);
    body_backward(d_hidden);
  }

  /// The body's backward from d(hidden), with the shares of partial gradients summed.
  void body_backward(RowMatrix<Scalar>& d_hidden) {
    // Tensors whose gradient each rank computes only a share of: this pass's contribution is
    // summed over the ranks apart from what the buffers already held (earlier micro-batches).
    std::vector<std::pair<ParameterTensor<Scalar>*, RowMatrix<Scalar>>> partial;
    for_each_tensor([&](ParameterTensor<Scalar>& t) {
      if (t.grad.size() == 0 || partition_.partial_gradient(t.name) == TensorParallelPartition::PartialGradient::none) return;
      partial.emplace_back(&t, t.grad);
      t.grad.setZero();
    });
    body_.backward(d_hidden);
    for (auto& [tensor, earlier] : partial) {
      group_->sum_partial_gradient(partition_.partial_gradient(tensor->name), tensor->grad);
      tensor->grad += earlier;
    }
  }

  /// This rank's shards (as state_dict() gives them). A tied model ignores "lm_head.weight".
  void load_state_dict(const StateDict& dict) {
    detail::load_state_dict(*this, dict, config_.tie_word_embeddings ? "lm_head.weight" : "");
  }

  /// This rank's shards of full tensors (a Hugging Face state dict); strict as load_state_dict.
  void load_full_state_dict(const StateDict& dict) {
    std::set<std::string_view> used;
    for_each_tensor([&](ParameterTensor<Scalar>& t) {
      const auto found = dict.find(t.name);
      VERL_CHECK_ARG(found != dict.end(), "state_dict: missing tensor '{}'", t.name);
      const auto expected = full_shape(t);
      VERL_CHECK_ARG(std::ranges::equal(found->second.shape, expected) &&
                         found->second.values.size() == static_cast<std::size_t>(numel(expected)),
                     "state_dict: tensor '{}': expected shape {} with {} values, got {} with {}", t.name,
                     detail::shape_string(expected), numel(expected), detail::shape_string(found->second.shape),
                     found->second.values.size());
      copy_shard(t, found->second.shape, found->second.values.data());
      used.insert(found->first);
    });
    for (const auto& [name, tensor] : dict) {
      VERL_CHECK_ARG(used.contains(name) || (config_.tie_word_embeddings && name == "lm_head.weight") ||
                         (!pipeline_stage().whole_model() && other_stage_tensor(name)),
                     "state_dict: unexpected tensor '{}' (shape {})", name, detail::shape_string(tensor.shape));
    }
  }

  /// Collective over the TP group and `pipeline` (rank s: stage s, of this rank's TP coordinate):
  /// the dense model every stage's shards make up, on every rank (weights only), the pipeline
  /// all-gather of the 3D-HybridEngine with pg = 1: each tensor gathered over its stage's TP
  /// group, then broadcast from that stage. `misplace_blocks` as gather_dense's.
  [[nodiscard]] BasicTransformer<Scalar> gather_dense_over_stages(Comm& pipeline, int misplace_blocks = 0) {
    require_weights("gather_dense_over_stages");
    require_lm_head("gather_dense_over_stages");
    const int stages = pipeline.size(), stage = pipeline.rank();
    VERL_CHECK_ARG(pipeline_stage() == pipeline_stage_layers(config_, stage, stages),
                   "gather_dense_over_stages: this rank holds layers [{}, {}), the pipeline communicator puts it at "
                   "stage {} of {}",
                   pipeline_stage().first_layer, pipeline_stage().first_layer + pipeline_stage().layers, stage, stages);
    BasicTransformer<Scalar> dense(config_, body_.options());
    std::map<std::string_view, ParameterTensor<Scalar>*> mine;
    for_each_tensor([&](ParameterTensor<Scalar>& t) {
      // Checked before any message: a rank holding another stage's tensor would wait forever.
      VERL_CHECK_ARG(pipeline_stage_of(config_, stages, t.name) == stage,
                     "gather_dense_over_stages: tensor '{}' belongs to stage {} of {}, this rank (stage {}) holds it",
                     t.name, pipeline_stage_of(config_, stages, t.name), stages, stage);
      mine.emplace(t.name, &t);
    });
    dense.for_each_tensor([&](ParameterTensor<Scalar>& target) {
      const int owner = pipeline_stage_of(config_, stages, target.name);
      if (owner == stage) {
        ParameterTensor<Scalar>& t = *mine.at(target.name);
        const RowMatrix<Scalar> value = gather(t, t.value, full_shape(t), misplace_blocks);
        std::copy(value.data(), value.data() + value.size(), target.value.data());
      }
      if (stages > 1) {
        pipeline.broadcast(std::span<Scalar>(target.value.data(), static_cast<std::size_t>(target.value.size())), owner);
      }
    });
    return dense;
  }

  /// Collective: visits every parameter gathered whole, as Parameter<const Scalar> (full shape,
  /// value, and gradient when gradients are enabled), in the order of for_each_parameter.
  template <class Fn>
  void for_each_full_parameter(Fn&& fn) {
    for_each_tensor([&](ParameterTensor<Scalar>& t) {
      const std::vector<std::int64_t> shape = full_shape(t);
      const RowMatrix<Scalar> value = gather(t, t.value, shape);
      const RowMatrix<Scalar> grad = t.grad.size() > 0 ? gather(t, t.grad, shape) : RowMatrix<Scalar>();
      fn(Parameter<const Scalar>{t.name, shape, {value.data(), static_cast<std::size_t>(value.size())},
                                 {grad.data(), static_cast<std::size_t>(grad.size())}});
    });
  }

  /// Collective: the squared L2 norm of the whole model's gradient (what gradient clipping
  /// needs), every element counted once: a replicated tensor is not counted once per rank, nor a
  /// copied KV head once per copy.
  [[nodiscard]] double gradient_squared_norm() {
    double local = 0;
    for_each_tensor([&](const ParameterTensor<Scalar>& t) {
      if (t.grad.size() == 0) return;
      local += t.grad.template cast<double>().squaredNorm() / gradient_copies(t.name);
    });
    group_->communicator().all_reduce(std::span<double>(&local, 1), parallel::ReduceOp::sum);
    return local;
  }

  /// How many ranks of the TP group hold the same gradient of `tensor`: the group's size for a
  /// replicated tensor, the KV replicas for a copied KV head, else 1. A rank adds its squared
  /// gradient divided by this to a global norm, so that every element counts once (Megatron's
  /// param_is_not_tensor_parallel_duplicate, as a share).
  [[nodiscard]] double gradient_copies(std::string_view tensor) const {
    if (shard_of(tensor).replicated()) return static_cast<double>(partition_.size);
    if (partition_.partial_gradient(tensor) == TensorParallelPartition::PartialGradient::kv_replicas)
      return static_cast<double>(partition_.kv_replicas);
    return 1.0;
  }

  /// Collective: the full tensors (a Hugging Face state dict), on every rank.
  [[nodiscard]] StateDict full_state_dict() {
    StateDict dict;
    for_each_full_parameter([&](const Parameter<const Scalar>& p) {
      StateTensor& tensor = dict[std::string(p.name)];
      tensor.shape.assign(p.shape.begin(), p.shape.end());
      tensor.values.resize(p.value.size());
      std::transform(p.value.begin(), p.value.end(), tensor.values.begin(), [](Scalar v) { return static_cast<float>(v); });
    });
    return dict;
  }

  /// Collective: the dense model these shards make up (weights only: gradients are not
  /// gathered), e.g. to save it with save_transformer, or as the 3D-HybridEngine's generation
  /// copy with tg = 1. `misplace_blocks` is a testing hook: k > 0 writes the block of rank r where
  /// rank (r + k) % size's belongs (a deliberately wrong shard assignment, which tests must catch;
  /// only for blocks of equal sizes).
  [[nodiscard]] BasicTransformer<Scalar> gather_dense(int misplace_blocks = 0) {
    require_whole_model("gather_dense");
    require_lm_head("gather_dense");
    BasicTransformer<Scalar> dense(config_, body_.options());
    std::map<std::string_view, ParameterTensor<Scalar>*> targets;
    dense.for_each_tensor([&](ParameterTensor<Scalar>& t) { targets.emplace(t.name, &t); });
    for_each_tensor([&](ParameterTensor<Scalar>& t) {
      const RowMatrix<Scalar> value = gather(t, t.value, full_shape(t), misplace_blocks);
      ParameterTensor<Scalar>& target = *targets.at(t.name);
      std::copy(value.data(), value.data() + value.size(), target.value.data());
    });
    return dense;
  }

  /// Collective: the full tensor `name` from every rank's shard values `local` (a parameter, its
  /// gradient or an optimizer moment laid out like the parameter), row-major.
  [[nodiscard]] std::vector<Scalar> gather_full(std::string_view name, std::span<const Scalar> local) {
    std::vector<Scalar> out;
    for_each_tensor([&](ParameterTensor<Scalar>& t) {
      if (t.name != name) return;
      VERL_CHECK_ARG(local.size() == static_cast<std::size_t>(t.value.size()),
                     "gather_full: tensor '{}': expected {} local values, got {}", name, t.value.size(), local.size());
      const RowMatrix<Scalar> shard = Eigen::Map<const RowMatrix<Scalar>>(local.data(), t.value.rows(), t.value.cols());
      const RowMatrix<Scalar> full = gather(t, shard, full_shape(t));
      out.assign(full.data(), full.data() + full.size());
    });
    return out;
  }

  /// This rank's block of the full tensor `name` (row-major values of the full shape), as
  /// load_full_state_dict cuts it: for optimizer moments saved whole.
  [[nodiscard]] std::vector<Scalar> shard_values(std::string_view name, std::span<const float> full) const {
    std::vector<Scalar> out;
    for_each_tensor([&](const ParameterTensor<Scalar>& t) {
      if (t.name != name) return;
      const auto shape = full_shape(t);
      VERL_CHECK_ARG(full.size() == static_cast<std::size_t>(numel(shape)),
                     "shard_values: tensor '{}': expected {} values (shape {}), got {}", name, numel(shape),
                     detail::shape_string(shape), full.size());
      const detail::ShardBlock block = detail::shard_block(shard_of(t.name), shape);
      const Eigen::Map<const RowMatrix<float>> source(full.data(), shape.size() == 2 ? shape[0] : 1, shape.back());
      const RowMatrix<Scalar> part = source.block(block.row, block.col, block.rows, block.cols).template cast<Scalar>();
      out.assign(part.data(), part.data() + part.size());
    });
    return out;
  }

  void release_activations() {
    saved_ = false;
    release_head();
    body_.release_activations();
  }

  /// Every parameter tensor of this rank (the embedding once when tied).
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
  struct AdoptWeights {};
  /// A model over weights that already hold this rank's shards (no parameter buffer allocated).
  BasicTensorParallelTransformer(AdoptWeights, HfModelConfig config, Comm tp, const TransformerOptions& options,
                                 DecoderWeights<Scalar> weights, ParameterTensor<Scalar> head,
                                 std::shared_ptr<cpu::ThreadPool> pool)
      : config_(std::move(config)),
        partition_(TensorParallelPartition::of(config_, tp.size(), tp.rank())),
        body_(partition_.local_config(config_), options, std::move(weights), std::move(pool)),
        group_(std::make_unique<detail::TensorParallelGroup<Scalar, Comm>>(std::move(tp), partition_)),
        lm_head_(std::move(head)) {
    body_.set_tensor_parallel(group_.get());
    VERL_CHECK_ARG(config_.tie_word_embeddings != lm_head_.present(),
                   "lm_head.weight: expected {} (tie_word_embeddings = {})", config_.tie_word_embeddings ? "none" : "one",
                   config_.tie_word_embeddings);
    if (lm_head_.present()) {
      VERL_CHECK_ARG(lm_head_.value.rows() == partition_.vocab_rows(partition_.rank) &&
                         lm_head_.value.cols() == config_.hidden_size,
                     "lm_head.weight: expected this rank's ({}, {}) rows, got ({}, {})",
                     partition_.vocab_rows(partition_.rank), config_.hidden_size, lm_head_.value.rows(),
                     lm_head_.value.cols());
    }
  }

  /// `lm_head`: the model has the LM head (tied embeddings then span the first and last stages).
  static DecoderBody<Scalar> make_body(const HfModelConfig& local, const TransformerOptions& options,
                                       PipelineStageLayers stage, bool lm_head) {
    if (stage.whole_model()) return DecoderBody<Scalar>(local, options);
    VERL_CHECK_ARG(!lm_head || !local.tie_word_embeddings || (stage.embeds && stage.final_norm),
                   "pipeline stage: tie_word_embeddings = true over several stages is not supported");
    DecoderWeights<Scalar> weights;
    if (stage.embeds) {
      weights.embed_tokens = ParameterTensor<Scalar>::matrix("model.embed_tokens.weight", local.vocab_size, local.hidden_size);
    }
    weights.layers.reserve(static_cast<std::size_t>(stage.layers));
    for (Index l = stage.first_layer; l < stage.first_layer + stage.layers; ++l) weights.layers.emplace_back(local, l);
    if (stage.final_norm) weights.norm = ParameterTensor<Scalar>::vector("model.norm.weight", local.hidden_size);
    return DecoderBody<Scalar>(local, options, std::move(weights), std::make_shared<cpu::ThreadPool>(options.num_threads),
                               stage);
  }

  void require_lm_head(std::string_view call) const {
    VERL_CHECK_ARG(head_ == TensorParallelHead::lm_head,
                   "{}: this model is a trunk without the LM head (TensorParallelHead::none): use forward_hidden and "
                   "backward_hidden",
                   call);
  }

  void require_whole_model(std::string_view call) const {
    VERL_CHECK_ARG(pipeline_stage().whole_model(),
                   "{}: this model is a pipeline stage (layers [{}, {})); generation needs every layer (gather them "
                   "with gather_dense_over_stages)",
                   call, pipeline_stage().first_layer, pipeline_stage().first_layer + pipeline_stage().layers);
  }

  /// A Hugging Face tensor another pipeline stage holds.
  bool other_stage_tensor(std::string_view name) const {
    if (name == "model.embed_tokens.weight") return !first_stage();
    if (name == "model.norm.weight" || name == "lm_head.weight") return !last_stage();
    constexpr std::string_view prefix = "model.layers.";
    if (!name.starts_with(prefix)) return false;
    Index layer = 0;
    for (std::size_t i = prefix.size(); i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) layer = layer * 10 + (name[i] - '0');
    const PipelineStageLayers& stage = pipeline_stage();
    return layer < config_.num_hidden_layers && (layer < stage.first_layer || layer >= stage.first_layer + stage.layers);
  }

  void require_weights(std::string_view call) const {
    VERL_CHECK_ARG(!lent_,
                   "{}: this model's weights are lent to a generation model (call take_back_from_generation first)",
                   call);
  }

  static std::int64_t bytes_of(const RowMatrix<Scalar>& m) {
    return static_cast<std::int64_t>(m.size()) * static_cast<std::int64_t>(sizeof(Scalar));
  }
  /// Resizes `m` to (rows, cols) keeping its leading rows * cols values: in place when only the
  /// number of rows changes (a realloc of the row-major storage), counted by `meter`.
  static void regrow(RowMatrix<Scalar>& m, Index rows, Index cols, ParameterMemoryMeter& meter) {
    const std::int64_t before = bytes_of(m);
    if (m.cols() != cols) {
      VERL_CHECK_ARG(m.size() % cols == 0, "reshard: cannot view {} values as rows of {}", m.size(), cols);
      m.resize(m.size() / cols, cols);  // same size: a new shape over the same storage
    }
    m.conservativeResize(rows, cols);
    meter.resized(before, bytes_of(m));
  }

  /// The members of a micro-DP group whose training blocks of `name` tile generation rank g's
  /// block: one per distinct block (the first copy of a replicated KV head), in tp order.
  struct Contribution {
    int member = 0;
    TensorParallelShard shard;
  };
  std::vector<Contribution> contributions(std::string_view name, int g, int kt, const TensorParallelShard& target) const {
    std::vector<Contribution> out;
    for (int m = 0; m < kt; ++m) {
      const TensorParallelShard shard = partition_.shard(name, g * kt + m);
      if (!out.empty() && out.back().shard.offset == shard.offset && out.back().shard.length == shard.length) continue;
      out.push_back({m, shard});
    }
    Index at = target.offset;
    for (const auto& c : out) {
      VERL_CHECK_ARG(c.shard.dim == target.dim && c.shard.offset == at,
                     "reshard: tensor '{}': the micro-DP group's training blocks do not tile generation block [{}, {}) "
                     "along dim {}: member {} holds [{}, {}) where [{}, ...) was expected",
                     name, target.offset, target.offset + target.length, target.dim, c.member, c.shard.offset,
                     c.shard.offset + c.shard.length, at);
      at += c.shard.length;
    }
    VERL_CHECK_ARG(at == target.offset + target.length,
                   "reshard: tensor '{}': the micro-DP group's training blocks end at {}, the generation block at {}", name,
                   at, target.offset + target.length);
    return out;
  }

  /// One tensor: training shard -> generation shard, in place (see lend_to_generation).
  void grow_into_generation(ParameterTensor<Scalar>& t, const TensorParallelPartition& generation, Comm& micro_dp,
                            ParameterMemoryMeter& meter, int misplace_blocks) const {
    const TensorParallelShard own = shard_of(t.name);
    if (own.replicated()) return;
    const int kt = micro_dp.size(), j = micro_dp.rank();
    const TensorParallelShard target = generation.shard(t.name, generation.rank);
    const std::vector<Contribution> parts = contributions(t.name, generation.rank, kt, target);
    if (parts.size() == 1) return;  // this rank's block is already the generation block
    // Storage: rank-1 tensors are one row (their torch dim 0 is a column split), matrices split by
    // dim 0 are row blocks, by dim 1 column blocks.
    const bool by_rows = t.shape.size() == 2 && own.dim == 0;
    const Index rows = t.value.rows(), cols = t.value.cols();
    const Index item = by_rows ? cols : own.length;  // a column block's row piece
    std::vector<std::int64_t> counts(static_cast<std::size_t>(kt), 0);
    Index slot = -1, offset = 0;
    for (const auto& c : parts) {
      VERL_CHECK_ARG(by_rows || c.shard.length == own.length,
                     "reshard: tensor '{}': column blocks of unequal widths ({} and {}) are not gathered in place",
                     t.name, c.shard.length, own.length);
      if (c.member == j) slot = offset;
      const Index values = by_rows ? c.shard.length * cols : rows * c.shard.length;
      counts[static_cast<std::size_t>(c.member)] = values;
      offset += values;
    }
    const Index own_values = t.value.size();
    // Grow: the training block stays at the start of the storage, the rest is new.
    regrow(t.value, by_rows ? target.length : rows * static_cast<Index>(parts.size()), by_rows ? cols : own.length,
           meter);
    // Its own block to its slot (a copy that does not contribute is overwritten by the first copy's).
    if (slot > 0) std::memmove(t.value.data() + slot, t.value.data(), static_cast<std::size_t>(own_values) * sizeof(Scalar));
    micro_dp.all_gather_v_in_place(std::span<Scalar>(t.value.data(), static_cast<std::size_t>(t.value.size())),
                                   std::span<const std::int64_t>(counts));
    if (misplace_blocks % static_cast<int>(parts.size()) != 0) {
      const Index block = by_rows ? parts.front().shard.length * cols : rows * own.length;
      VERL_CHECK_ARG(block * static_cast<Index>(parts.size()) == t.value.size(),
                     "reshard: misplace_blocks = {} needs blocks of equal sizes ('{}')", misplace_blocks, t.name);
      std::rotate(t.value.data(), t.value.data() + block * (misplace_blocks % static_cast<Index>(parts.size())),
                  t.value.data() + t.value.size());
    }
    if (!by_rows) {
      // (blocks, rows, width) -> (rows, blocks, width): each row's pieces side by side.
      detail::transpose_items_in_place(t.value.data(), static_cast<Index>(parts.size()), rows, item);
      t.value.resize(rows, item * static_cast<Index>(parts.size()));  // same size: no allocation
    }
    t.shape[static_cast<std::size_t>(own.dim)] = target.length;
  }

  /// One tensor: generation shard -> this rank's training shard, in place.
  void shrink_to_training(ParameterTensor<Scalar>& t, const TensorParallelPartition& generation,
                          ParameterMemoryMeter& meter) const {
    const TensorParallelShard own = shard_of(t.name);
    if (own.replicated()) return;
    const TensorParallelShard held = generation.shard(t.name, generation.rank);
    VERL_CHECK_ARG(held.dim == own.dim && held.offset <= own.offset && own.offset + own.length <= held.offset + held.length,
                   "reshard: tensor '{}': the generation block [{}, {}) does not hold this rank's training block [{}, {})",
                   t.name, held.offset, held.offset + held.length, own.offset, own.offset + own.length);
    if (held.length == own.length) return;
    const bool by_rows = t.shape.size() == 2 && own.dim == 0;
    const Index rows = t.value.rows();
    if (by_rows) {
      const Index cols = t.value.cols(), first = (own.offset - held.offset) * cols;
      std::memmove(t.value.data(), t.value.data() + first, static_cast<std::size_t>(own.length * cols) * sizeof(Scalar));
      regrow(t.value, own.length, cols, meter);
    } else {
      const Index blocks = held.length / own.length, width = own.length;
      VERL_CHECK_ARG(blocks * width == held.length && (own.offset - held.offset) % width == 0,
                     "reshard: tensor '{}': the generation block [{}, {}) is not whole blocks of {}", t.name, held.offset,
                     held.offset + held.length, width);
      detail::transpose_items_in_place(t.value.data(), rows, blocks, width);  // -> (blocks, rows, width)
      const Index first = (own.offset - held.offset) / width * rows * width;
      std::memmove(t.value.data(), t.value.data() + first, static_cast<std::size_t>(rows * width) * sizeof(Scalar));
      regrow(t.value, rows, width, meter);
    }
    t.shape[static_cast<std::size_t>(own.dim)] = own.length;
  }

  /// require_same_batch for decode chunks.
  void require_same_batch_tokens(std::span<const TokenId> tokens) {
    if (partition_.size == 1) return;
    std::uint64_t hash = 0;
    for (const TokenId id : tokens) hash = hash * 1099511628211ull + static_cast<std::uint64_t>(id);
    const auto checksum = static_cast<std::int64_t>(hash >> 2);
    const auto n = static_cast<std::int64_t>(tokens.size());
    std::array<std::int64_t, 4> bounds{n, -n, checksum, -checksum};
    group_->communicator().all_reduce(std::span<std::int64_t>(bounds), parallel::ReduceOp::max);
    VERL_CHECK_ARG(bounds[0] == -bounds[1] && bounds[2] == -bounds[3],
                   "tokens: expected the same decode tokens on every tensor-parallel rank, got between {} and {} tokens "
                   "(or different token ids)",
                   -bounds[1], bounds[0]);
  }

  /// This rank's (V / size, H) rows of the output projection.
  [[nodiscard]] const RowMatrix<Scalar>& head_weight() const {
    return lm_head_.present() ? lm_head_.value : body_.weights().embed_tokens.value;
  }

  void chunk_logits(const Eigen::Ref<const RowMatrix<Scalar>>& hidden, RowMatrix<Scalar>& logits) const {
    if (logits.rows() != hidden.rows() || logits.cols() != head_weight().rows()) {
      logits.resize(hidden.rows(), head_weight().rows());
    }
    detail::linear_forward<Scalar>(body_.pool(), hidden, head_weight(), nullptr, logits);
  }

  /// With one rank the dense model's statistics (the same numbers, bit for bit); else the
  /// vocabulary-parallel ones.
  void head_forward(const RowMatrix<Scalar>& logits, std::span<const TokenId> labels, float temperature,
                    Scalar* log_probs, Scalar* entropy, Scalar* sum_pi_squared, bool keep) {
    if (partition_.size == 1) {
      auto stats = detail::head_forward<Scalar>(logits, labels, temperature, body_.pool().size(), log_probs, entropy,
                                                sum_pi_squared);
      if (keep) dense_statistics_.push_back(std::move(stats));
      return;
    }
    const auto rows = static_cast<std::size_t>(logits.rows());
    auto stats = parallel::vocab_parallel_logprob_entropy<Scalar>(
        group_->communicator(), logits, partition_.vocab_begin(partition_.rank), partition_.vocab_size, labels,
        temperature,
        {.log_probs = labels.empty() ? std::span<Scalar>{} : std::span<Scalar>(log_probs, rows),
         .entropy = std::span<Scalar>(entropy, rows),
         .sum_pi_squared = std::span<Scalar>(sum_pi_squared, rows)},
        &body_.pool());
    if (keep) statistics_.push_back(std::move(stats));
  }

  void head_backward(RowMatrix<Scalar>& logits, std::span<const TokenId> labels, std::size_t chunk,
                     std::span<const Scalar> grad_log_probs, std::span<const Scalar> grad_entropy) {
    if (partition_.size == 1) {
      detail::head_backward<Scalar>(logits, labels, dense_statistics_[chunk], grad_log_probs, grad_entropy,
                                    saved_temperature_, body_.pool().size());
      return;
    }
    parallel::vocab_parallel_logprob_entropy_backward<Scalar>(logits, partition_.vocab_begin(partition_.rank), labels,
                                                              statistics_[chunk], grad_log_probs, grad_entropy,
                                                              saved_temperature_, &body_.pool());
  }

  void release_head() {
    dense_statistics_.clear();
    statistics_.clear();
    saved_logits_.clear();
  }

  /// Every rank of the group must run the same tokens (else the collectives would not match).
  void require_same_batch(const TokenBatch& batch) {
    if (partition_.size == 1) return;
    std::uint64_t hash = 0;
    for (const TokenId id : batch.tokens()) hash = hash * 1099511628211ull + static_cast<std::uint64_t>(id);
    const auto checksum = static_cast<std::int64_t>(hash >> 2);  // room for its negation
    std::array<std::int64_t, 4> bounds{batch.num_tokens(), -batch.num_tokens(), checksum, -checksum};
    group_->communicator().all_reduce(std::span<std::int64_t>(bounds), parallel::ReduceOp::max);
    VERL_CHECK_ARG(bounds[0] == -bounds[1] && bounds[2] == -bounds[3],
                   "batch: expected the same tokens on every tensor-parallel rank, got between {} and {} tokens "
                   "(or different token ids)",
                   -bounds[1], bounds[0]);
  }

  /// (rows, this rank's vocabulary columns) -> (rows, vocab), collective.
  RowMatrix<Scalar> gather_vocabulary(const RowMatrix<Scalar>& shard) {
    if (partition_.size == 1) return shard;
    const Index rows = shard.rows();
    std::vector<std::int64_t> counts(static_cast<std::size_t>(partition_.size));
    for (int r = 0; r < partition_.size; ++r) counts[static_cast<std::size_t>(r)] = rows * partition_.vocab_rows(r);
    std::vector<Scalar> blocks(static_cast<std::size_t>(rows * vocab_size()));
    group_->communicator().all_gather_v(std::span<const Scalar>(shard.data(), static_cast<std::size_t>(shard.size())),
                                        std::span<Scalar>(blocks), std::span<const std::int64_t>(counts));
    RowMatrix<Scalar> full(rows, vocab_size());
    const Scalar* block = blocks.data();
    for (int r = 0; r < partition_.size; ++r) {
      const Index cols = partition_.vocab_rows(r);
      full.middleCols(partition_.vocab_begin(r), cols) = Eigen::Map<const RowMatrix<Scalar>>(block, rows, cols);
      block += rows * cols;
    }
    return full;
  }

  [[nodiscard]] std::vector<std::int64_t> full_shape(const ParameterTensor<Scalar>& t) const {
    std::vector<std::int64_t> shape = t.shape;
    const TensorParallelShard shard = shard_of(t.name);
    if (!shard.replicated()) shape[static_cast<std::size_t>(shard.dim)] = shard.full;
    return shape;
  }
  static Index numel(std::span<const std::int64_t> shape) {
    Index n = 1;
    for (const auto extent : shape) n *= extent;
    return n;
  }

  /// Copies this rank's block of a full tensor (row-major, `shape`) into `t`.
  template <class T>
  void copy_shard(ParameterTensor<Scalar>& t, std::span<const std::int64_t> shape, const T* full) const {
    const detail::ShardBlock block = detail::shard_block(shard_of(t.name), shape);
    const Eigen::Map<const RowMatrix<T>> source(full, shape.size() == 2 ? shape[0] : 1, shape.back());
    t.value = source.block(block.row, block.col, block.rows, block.cols).template cast<Scalar>();
  }

  /// The full tensor from every rank's block of `local` (t.value or t.grad); collective.
  RowMatrix<Scalar> gather(const ParameterTensor<Scalar>& t, const RowMatrix<Scalar>& local,
                           std::span<const std::int64_t> shape, int misplace_blocks = 0) {
    if (shard_of(t.name).replicated() || partition_.size == 1) return local;
    std::vector<detail::ShardBlock> blocks;
    std::vector<std::int64_t> counts;
    for (int r = 0; r < partition_.size; ++r) {
      blocks.push_back(detail::shard_block(partition_.shard(t.name, r), shape));
      counts.push_back(blocks.back().rows * blocks.back().cols);
    }
    std::vector<Scalar> received(static_cast<std::size_t>(std::accumulate(counts.begin(), counts.end(), std::int64_t{0})));
    group_->communicator().all_gather_v(std::span<const Scalar>(local.data(), static_cast<std::size_t>(local.size())),
                                        std::span<Scalar>(received), std::span<const std::int64_t>(counts));
    RowMatrix<Scalar> full(shape.size() == 2 ? shape[0] : 1, shape.back());
    const Scalar* from = received.data();
    for (int r = 0; r < partition_.size; ++r) {  // copies of a KV head write the same values twice
      const auto& source = blocks[static_cast<std::size_t>(r)];
      const auto& block = blocks[static_cast<std::size_t>((r + misplace_blocks) % partition_.size)];
      VERL_CHECK_ARG(block.rows == source.rows && block.cols == source.cols,
                     "gather: misplace_blocks = {} needs blocks of equal sizes ('{}')", misplace_blocks, t.name);
      full.block(block.row, block.col, block.rows, block.cols) = Eigen::Map<const RowMatrix<Scalar>>(from, block.rows, block.cols);
      from += block.rows * block.cols;
    }
    return full;
  }

  HfModelConfig config_;
  TensorParallelPartition partition_;
  DecoderBody<Scalar> body_;
  // On the heap: the body keeps a pointer to it, which must survive moves of the model.
  std::unique_ptr<detail::TensorParallelGroup<Scalar, Comm>> group_;
  TensorParallelHead head_ = TensorParallelHead::lm_head;
  ParameterTensor<Scalar> lm_head_;
  bool lent_ = false;  ///< the weights are a generation model's (lend_to_generation)

  // Scratch of the KV-cache path.
  DecodePrecision decode_precision_ = body_.options().decode_precision;
  std::shared_ptr<detail::PackedWeightsRecycler> packed_recycler_ = std::make_shared<detail::PackedWeightsRecycler>();
  detail::LayerActivations<Scalar> decode_activations_;
  RowMatrix<Scalar> decode_cos_, decode_sin_;

  // The last forward pass, for backward.
  bool saved_ = false;
  std::vector<detail::HeadStatistics<Scalar>> dense_statistics_;           ///< one rank
  std::vector<parallel::VocabParallelStatistics<Scalar>> statistics_;      ///< several ranks
  std::vector<RowMatrix<Scalar>> saved_logits_;  ///< per chunk, when they fit max_saved_logits_bytes
  std::vector<TokenId> saved_targets_;
  std::vector<std::int64_t> saved_slots_;
  Index saved_layout_size_ = 0;
  float saved_temperature_ = 1.0f;
  bool saved_entropy_ = false;
};

template <parallel::Communicator Comm>
using TensorParallelTransformer = BasicTensorParallelTransformer<float, Comm>;

}  // namespace verl::model
