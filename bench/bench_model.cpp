// The reference transformer's throughput on the tiny test config and a ~30M-parameter Qwen2-style
// config (random weights):
//   Generate            KV-cache rollout, tokens generated per second (greedy, no early stop);
//   GenerateNoCache     the naive reference measured in the same run: every step recomputes the
//                       whole sequence with a full forward pass;
//   ForwardBackward     log-prob loss forward + backward over packed sequences, tokens per second.
//   Gemm                the float32 products of a 30M model's forward + backward, GFLOP/s.
//   WeightRead          the memory-bound pass of a decode step: reading as many bytes as the
//                       model's weights (float32, or bfloat16 with the second argument 1), in
//                       three prefetched streams per thread as the decode kernel reads them (the
//                       fastest read of them measured on our Cascade Lake host; one stream is
//                       slower). A decode step reads every weight once, so batch / this time is
//                       the rate of a decoder that did nothing else: the ceiling bench_hf_baseline.py
//                       reports next to transformers.
// Counters also report the KV cache's bytes next to what the shapes require, and the rate at which
// the decode loop gets through the weights (a decode step of 8 rows is bound by reading them).
// The side-by-side with transformers / PyTorch eager is tools/scripts/bench_hf_baseline.py
// (same configs, batch shapes and thread count: VERL_BENCH_THREADS, default all cores).
#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "verl/algo/detail/parallel_rows.hpp"
#include "verl/cpu/gemm.hpp"
#include "verl/cpu/thread_pool.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/rollout/rollout.hpp"

namespace {

using namespace verl::model;
namespace cpu = verl::cpu;
using verl::Index;

unsigned bench_threads() {
  const char* value = std::getenv("VERL_BENCH_THREADS");
  return value != nullptr ? static_cast<unsigned>(std::atoi(value)) : 0u;
}

HfModelConfig config_named(int which) {
  if (which == 0) {  // tests/data/models/tiny-qwen2
    return HfModelConfig::from_json({{"model_type", "qwen2"},
                                     {"vocab_size", 1408},
                                     {"hidden_size", 32},
                                     {"intermediate_size", 64},
                                     {"num_hidden_layers", 2},
                                     {"num_attention_heads", 4},
                                     {"num_key_value_heads", 2},
                                     {"max_position_embeddings", 4096},
                                     {"tie_word_embeddings", true}});
  }
  // ~31M parameters: a narrow Qwen2 with a Llama-2-sized vocabulary.
  return HfModelConfig::from_json({{"model_type", "qwen2"},
                                   {"vocab_size", 32000},
                                   {"hidden_size", 512},
                                   {"intermediate_size", 1408},
                                   {"num_hidden_layers", 5},
                                   {"num_attention_heads", 8},
                                   {"num_key_value_heads", 4},
                                   {"max_position_embeddings", 4096},
                                   {"tie_word_embeddings", true}});
}

const char* config_label(int which) { return which == 0 ? "tiny" : "30M"; }

std::vector<std::vector<TokenId>> prompts_for(Index batch, Index length, Index vocab) {
  std::vector<std::vector<TokenId>> prompts(static_cast<std::size_t>(batch));
  for (Index b = 0; b < batch; ++b) {
    for (Index t = 0; t < length; ++t) prompts[static_cast<std::size_t>(b)].push_back((b * 131 + t * 17 + 3) % vocab);
  }
  return prompts;
}

constexpr Index generate_batch = 8, prompt_length = 16, new_tokens = 64;

/// Greedy KV-cache generation; the second argument 1 decodes with bfloat16 weights (verl's
/// rollout.dtype: bfloat16).
void BM_Generate(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const auto precision = state.range(1) == 1 ? verl::model::DecodePrecision::bfloat16 : verl::model::DecodePrecision::float32;
  Transformer model = Transformer::random(config_named(which), {.seed = 1},
                                          {.num_threads = bench_threads(), .decode_precision = precision});
  verl::rollout::KvCacheRollout engine(model);
  const auto prompts = verl::rollout::PromptBatch::left_padded(prompts_for(generate_batch, prompt_length, model.vocab_size()), 0);
  const verl::rollout::SamplingParams params{.temperature = 0.0f, .max_response_length = new_tokens};
  std::size_t cache_bytes = 0;
  // Warm-up, as the transformers side's (bench_hf_baseline.py's timed): a rollout loop's steady state.
  (void)engine.generate(prompts, params);
  for (auto _ : state) {
    const auto out = engine.generate(prompts, params);
    cache_bytes = out.kv_cache_bytes;
    benchmark::DoNotOptimize(out.responses.data());
  }
  const auto& c = model.config();
  const double required = static_cast<double>(generate_batch * (prompt_length + new_tokens - 1) * c.num_hidden_layers * 2 *
                                              c.num_key_value_heads * c.head_dim * sizeof(float));
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(generate_batch * new_tokens), benchmark::Counter::kIsIterationInvariantRate);
  // Every decode step reads every weight once (they do not fit in the caches at 30M): the rate at
  // which the loop as a whole gets through them, against the memory bandwidth of one core.
  const double weight_bytes = precision == verl::model::DecodePrecision::bfloat16 ? 2.0 : sizeof(float);
  state.counters["weights_GB_per_s"] = benchmark::Counter(
      static_cast<double>(verl::model::parameter_count(model)) * weight_bytes * new_tokens / 1e9,
      benchmark::Counter::kIsIterationInvariantRate);
  state.counters["kv_cache_MiB"] = static_cast<double>(cache_bytes) / (1 << 20);
  state.counters["kv_required_MiB"] = required / (1 << 20);
  state.counters["threads"] = model.num_threads();
  state.SetLabel(config_label(which));
}

/// The naive reference: no cache, a full forward over the growing sequences at every step.
void BM_GenerateNoCache(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  Transformer model = Transformer::random(config_named(which), {.seed = 1}, {.num_threads = bench_threads()});
  const auto prompts = prompts_for(generate_batch, prompt_length, model.vocab_size());
  for (auto _ : state) {
    auto sequences = prompts;
    for (Index step = 0; step < new_tokens; ++step) {
      std::vector<TokenId> ids;
      std::vector<std::int64_t> cu = {0};
      for (const auto& s : sequences) {
        ids.insert(ids.end(), s.begin(), s.end());
        cu.push_back(static_cast<std::int64_t>(ids.size()));
      }
      const auto out = model.forward(TokenBatch::packed(ids, cu), {.return_logits = true});
      for (std::size_t b = 0; b < sequences.size(); ++b) {
        Index best = 0;
        out.logits.row(cu[b + 1] - 1).maxCoeff(&best);
        sequences[b].push_back(best);
      }
    }
    benchmark::DoNotOptimize(sequences.data());
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(generate_batch * new_tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(config_label(which));
}

void BM_ForwardBackward(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const Index sequences = state.range(1), length = state.range(2);
  Transformer model = Transformer::random(config_named(which), {.seed = 1}, {.num_threads = bench_threads()});
  const auto prompts = prompts_for(sequences, length, model.vocab_size());
  std::vector<TokenId> ids;
  std::vector<std::int64_t> cu = {0};
  for (const auto& s : prompts) {
    ids.insert(ids.end(), s.begin(), s.end());
    cu.push_back(static_cast<std::int64_t>(ids.size()));
  }
  const auto batch = TokenBatch::packed(ids, cu);
  const verl::MatrixI64 targets = next_token_targets(batch);
  const std::vector<float> cotangent(ids.size(), 1.0f / static_cast<float>(ids.size()));
  model.zero_grad();
  // Warm-up, as the transformers side's: a training loop's steady state, where the decoder reuses
  // the previous step's activation buffers (the first step faults them all in).
  (void)model.forward(batch, {.targets = {targets.data(), ids.size()}, .keep_activations = true});
  model.backward({.log_probs = cotangent});
  for (auto _ : state) {
    const auto out = model.forward(batch, {.targets = {targets.data(), ids.size()}, .keep_activations = true});
    model.backward({.log_probs = cotangent});
    benchmark::DoNotOptimize(out.log_probs.data());
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(ids.size()), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = model.num_threads();
  state.SetLabel(config_label(which));
}

/// The products of one 30M forward + backward (8 x 256 tokens), as the model lays them out:
/// activations row-major, weights (out, in) row-major used transposed, weight gradients from a
/// transposed activation. bench_hf_baseline.py --gemm times torch.matmul on the same list.
struct GemmShape {
  const char* name;
  Index m, n, k;
  bool a_transposed, b_transposed;
};
constexpr GemmShape gemm_shapes[] = {
    {"lm_head_forward", 2048, 32000, 512, false, true}, {"lm_head_input_grad", 2048, 512, 32000, false, false},
    {"lm_head_weight_grad", 32000, 512, 2048, true, false}, {"mlp_up", 2048, 2816, 512, false, true},
    {"mlp_down", 2048, 512, 1408, false, true}, {"mlp_up_weight_grad", 2816, 512, 2048, true, false},
    {"qkv", 2048, 1024, 512, false, true}};

void BM_Gemm(benchmark::State& state) {
  using namespace verl::cpu;
  const GemmShape& shape = gemm_shapes[state.range(0)];
  ThreadPool pool(bench_threads());  // 0: the default thread count, as the model's pool
  std::vector<float> a(static_cast<std::size_t>(shape.m * shape.k)), b(static_cast<std::size_t>(shape.k * shape.n));
  std::vector<float> c(static_cast<std::size_t>(shape.m * shape.n));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (auto& x : a) x = uniform(rng);
  for (auto& x : b) x = uniform(rng);
  const cpu::Operand<float> a_op = shape.a_transposed ? cpu::transpose_of(a.data(), shape.m) : cpu::rows_of(a.data(), shape.k);
  const cpu::Operand<float> b_op = shape.b_transposed ? cpu::transpose_of(b.data(), shape.k) : cpu::rows_of(b.data(), shape.n);
  ThreadPool* threads = pool.size() > 1 ? &pool : nullptr;
  // Warm-up (as the torch side's): the packing buffers are allocated by the first call.
  cpu::gemm<float>(threads, shape.m, shape.n, shape.k, a_op, b_op, c.data(), shape.n, false);
  for (auto _ : state) {
    cpu::gemm<float>(threads, shape.m, shape.n, shape.k, a_op, b_op, c.data(), shape.n, false);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP_per_s"] = benchmark::Counter(2.0 * static_cast<double>(shape.m * shape.n) * static_cast<double>(shape.k) / 1e9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(shape.name);
}

/// Sum of n floats read as three sequential streams (a third each) with a software prefetch ahead
/// of each: the read pattern of the decode kernel (gemm.hpp's kernel_avx512_streams).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f"))) float sum_three_streams_avx512(const float* x, std::size_t n) {
  const std::size_t third = n / 3 / 32 * 32;
  __m512 acc[3] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (std::size_t i = 0; i < third; i += 32) {
    for (std::size_t s = 0; s < 3; ++s) {
      const float* p = x + s * third + i;
      _mm_prefetch(reinterpret_cast<const char*>(p + 512), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + 528), _MM_HINT_T0);
      acc[s] = _mm512_add_ps(acc[s], _mm512_add_ps(_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)));
    }
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(acc[0], _mm512_add_ps(acc[1], acc[2])));
  float total = 0.0f;
  for (const float lane : lanes) total += lane;
  for (std::size_t i = 3 * third; i < n; ++i) total += x[i];
  return total;
}
#endif

float sum_three_streams(const float* x, std::size_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx512f")) return sum_three_streams_avx512(x, n);
#endif
  float acc[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (std::size_t j = 0; j < 8; ++j) acc[j] += x[i + j];
  }
  for (; i < n; ++i) acc[0] += x[i];
  return acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
}

void BM_WeightRead(benchmark::State& state) {
  using verl::cpu::ThreadPool;
  const int which = static_cast<int>(state.range(0));
  const std::size_t weight_bytes = state.range(1) == 1 ? 2 : sizeof(float);
  const Transformer model = Transformer::random(config_named(which), {.seed = 1}, {.num_threads = 1});
  const auto bytes = static_cast<std::size_t>(verl::model::parameter_count(model)) * weight_bytes;
  std::vector<float> weights(bytes / sizeof(float), 1.0f);
  ThreadPool pool(bench_threads());  // 0: the default thread count, as the model's pool
  const auto parts = static_cast<Index>(pool.size());
  const std::size_t per_part = (weights.size() + static_cast<std::size_t>(parts) - 1) / static_cast<std::size_t>(parts);
  std::vector<float> sums(static_cast<std::size_t>(parts));
  auto read_all = [&] {
    pool.parallel_for(parts, [&](Index t) {
      const std::size_t begin = std::min(weights.size(), static_cast<std::size_t>(t) * per_part);
      const std::size_t end = std::min(weights.size(), begin + per_part);
      sums[static_cast<std::size_t>(t)] = sum_three_streams(weights.data() + begin, end - begin);
    });
  };
  read_all();  // warm-up, as BM_Generate's
  for (auto _ : state) {
    read_all();
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GB_per_s"] = benchmark::Counter(static_cast<double>(bytes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  // The tokens/s of a decoder whose steps did nothing but read the weights once.
  state.counters["bound_tokens_per_s"] =
      benchmark::Counter(static_cast<double>(generate_batch), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = static_cast<double>(pool.size());
  state.SetLabel(config_label(which));
}

BENCHMARK(BM_Generate)->ArgsProduct({{0, 1}, {0, 1}})->ArgNames({"", "bf16"})->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();
BENCHMARK(BM_GenerateNoCache)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();
BENCHMARK(BM_ForwardBackward)->Args({0, 8, 256})->Args({1, 8, 256})->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();
BENCHMARK(BM_WeightRead)->ArgsProduct({{1}, {0, 1}})->ArgNames({"", "bf16"})->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime();
BENCHMARK(BM_Gemm)->DenseRange(0, std::size(gemm_shapes) - 1)->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
