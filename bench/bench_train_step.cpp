// One supervised fine-tuning step of a SmolLM2-135M-shaped model (Llama: 30 layers, hidden 576,
// 9 query / 3 KV heads of 64, MLP 1536, 49152-token tied vocabulary; random weights, float32) on 8
// packed sequences of 64 tokens, as verl_sft runs it: forward with the log-prob loss, backward,
// gradient clipping and AdamW. In the same run, beside it:
//   FmaPeak    the machine's float32 FMA peak at the same thread count: independent FMA chains in
//              registers on every thread (AVX-512 and AVX2; the faster), the ceiling of any product;
//   SftStep    the step with its parts timed (forward, backward, clip + AdamW), and every matrix
//              product of its linear layers and LM head replayed alone with the shapes, operand
//              layouts and LM-head chunks the model uses (attention's per-head products stay in
//              the rest). Counters: the products' GFLOP/s and fraction of the peak measured in the
//              same process, and the step split into products, optimizer and the rest (attention,
//              RMSNorm, SwiGLU, rope, the log-softmax, gradient zeroing). The peak is the better of
//              two measurements, before and after the timed passes: one disturbed by a neighbour
//              (225 against 234 GFLOP/s once) would have raised the fraction by 4 points;
//   StepProducts the replay alone. Two processes of BM_StepProducts/1 side by side give what two
//              cores reach with nothing shared between them but the machine (caches, memory):
//                ( bench_train_step --benchmark_filter='BM_StepProducts/1/' &
//                  bench_train_step --benchmark_filter='BM_StepProducts/1/' & wait )
//   StepProductsVsBlas the replay against a BLAS library loaded at run time, in the same process,
//              a group of products of each in turn (one core's speed moves by a quarter for seconds
//              at a time on some hosts: rounds of separate processes then compare moments, not
//              libraries). VERL_BENCH_BLAS names a shared library with the Fortran sgemm_: MKL's
//              libmkl_rt.so.3 (`python3 -m pip download --no-deps mkl`, unzipped; its lib folder on
//              LD_LIBRARY_PATH and MKL_THREADING_LAYER=GNU for Debian's libgomp), PyTorch's
//              torch/lib/libtorch_cpu.so (MKL inside), or OpenBLAS:
//                export VERL_BENCH_BLAS=$VENV/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so
//                bench_train_step --benchmark_filter=BM_StepProductsVsBlas
//   StepProductsWarm the replay with each product called twice on the same operands, the second
//              call timed (the peer's too when VERL_BENCH_BLAS is set): against StepProducts, what
//              the operands' trips to memory cost;
//   TileKernel the 8 x 48 AVX-512 micro-kernel alone on packed operands kept in cache: the ceiling
//              of any blocking around it (with the two above, where the products lose the peak).
// The PyTorch eager side (transformers' LlamaForCausalLM, same shapes and threads) is
// tools/scripts/bench_sft_torch.py, which alternates rounds with this program.
//
//   VERL_BENCH_THREADS is not used: the thread count is the benchmark's argument (1 and 2).
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "verl/cpu/gemm.hpp"
#include "verl/cpu/thread_pool.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/optimizer_step.hpp"

namespace {

using namespace verl::model;
namespace cpu = verl::cpu;
using verl::Index;
using Clock = std::chrono::steady_clock;

constexpr Index sequences = 8, sequence_length = 64;
constexpr int fma_chains = 12;  // independent accumulators: more than FMA latency x FMA ports on x86 cores

HfModelConfig smollm2_135m_config() {
  return HfModelConfig::from_json({{"model_type", "llama"},
                                   {"vocab_size", 49152},
                                   {"hidden_size", 576},
                                   {"intermediate_size", 1536},
                                   {"num_hidden_layers", 30},
                                   {"num_attention_heads", 9},
                                   {"num_key_value_heads", 3},
                                   {"max_position_embeddings", 8192},
                                   {"rope_theta", 100000.0},
                                   {"rms_norm_eps", 1e-5},
                                   {"tie_word_embeddings", true}});
}

// ---- FMA peak -------------------------------------------------------------------------------

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f"))) float fma_chains_avx512(std::int64_t iterations) {
  __m512 acc[fma_chains];
  for (int j = 0; j < fma_chains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512 scale = _mm512_set1_ps(0.9999999f), shift = _mm512_set1_ps(1e-7f);
  for (std::int64_t i = 0; i < iterations; ++i) {
    // Unrolled whatever the optimization level: a loop over the accumulators would keep them in memory.
#pragma GCC unroll 16
    for (int j = 0; j < fma_chains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], scale, shift);
  }
  __m512 total = acc[0];
  for (int j = 1; j < fma_chains; ++j) total = _mm512_add_ps(total, acc[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, total);
  float sum = 0.0f;
  for (const float lane : lanes) sum += lane;
  return sum;
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(std::int64_t iterations) {
  __m256 acc[fma_chains];
  for (int j = 0; j < fma_chains; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  const __m256 scale = _mm256_set1_ps(0.9999999f), shift = _mm256_set1_ps(1e-7f);
  for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < fma_chains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], scale, shift);
  }
  __m256 total = acc[0];
  for (int j = 1; j < fma_chains; ++j) total = _mm256_add_ps(total, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, total);
  float sum = 0.0f;
  for (const float lane : lanes) sum += lane;
  return sum;
}
#endif

/// GFLOP/s of `threads` threads each running FMA chains for `iterations` (the best of `repeats`).
double fma_peak_gflops(cpu::ThreadPool& pool, std::int64_t iterations, int repeats) {
  double best = 0.0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const auto threads = static_cast<Index>(pool.size());
  std::vector<float> sinks(static_cast<std::size_t>(threads));
  for (const bool wide : {false, true}) {
    if (wide && !__builtin_cpu_supports("avx512f")) continue;
    if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) continue;
    const double lanes = wide ? 16.0 : 8.0;
    for (int r = 0; r < repeats; ++r) {
      const auto start = Clock::now();
      pool.parallel_for(threads, [&](Index t) {
        sinks[static_cast<std::size_t>(t)] = wide ? fma_chains_avx512(iterations) : fma_chains_avx2(iterations);
      });
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      benchmark::DoNotOptimize(sinks.data());
      best = std::max(best, static_cast<double>(threads) * static_cast<double>(iterations) * fma_chains * lanes * 2.0 /
                                seconds / 1e9);
    }
  }
#endif
  return best;
}

void BM_FmaPeak(benchmark::State& state) {
  cpu::ThreadPool pool(static_cast<unsigned>(state.range(0)));
  double gflops = 0.0;
  for (auto _ : state) gflops = std::max(gflops, fma_peak_gflops(pool, 20'000'000, 1));
  state.counters["GFLOP_per_s"] = gflops;
  state.counters["threads"] = static_cast<double>(pool.size());
}

// ---- the step's matrix products ---------------------------------------------------------------

/// One product as the model calls cpu::gemm: C (m, n) (+)= op(A) (m, k) op(B) (k, n).
struct Product {
  const char* part;
  Index m, n, k;
  bool a_transposed, b_transposed, accumulate;
};

/// Every product of one forward + backward of the linear layers and the LM head over `tokens`
/// tokens (detail/linear.hpp's layouts: y = x W^T, dx = dy W, dW += dy^T x; the head in the
/// model's chunks of rows, its logits saved by the forward pass for the backward).
std::vector<Product> step_products(const HfModelConfig& config, Index tokens) {
  const Index hidden = config.hidden_size, head_dim = config.head_dim;
  const Index q_width = config.num_attention_heads * head_dim, kv_width = config.num_key_value_heads * head_dim;
  struct Linear {
    Index out, in;
  };
  const Linear linears[] = {{q_width, hidden},  {kv_width, hidden},          {kv_width, hidden},
                            {hidden, q_width},  {config.intermediate_size, hidden}, {config.intermediate_size, hidden},
                            {hidden, config.intermediate_size}};
  std::vector<Product> products;
  for (Index layer = 0; layer < config.num_hidden_layers; ++layer) {
    for (const Linear& l : linears) {
      products.push_back({"linear_forward", tokens, l.out, l.in, false, true, false});
      products.push_back({"linear_backward_input", tokens, l.in, l.out, false, false, false});
      products.push_back({"linear_backward_weight", l.out, l.in, tokens, true, false, true});
    }
  }
  // The model's chunks: all tokens at once when their logits fit the saving budget (they do here).
  const bool logits_saved = static_cast<double>(tokens) * static_cast<double>(config.vocab_size) * sizeof(float) <=
                            static_cast<double>(verl::model::TransformerOptions{}.max_saved_logits_bytes);
  const Index chunk = verl::model::detail::lm_head_chunk_rows(config.vocab_size, tokens, logits_saved);
  for (Index t0 = 0; t0 < tokens; t0 += chunk) {
    const Index rows = std::min(chunk, tokens - t0);
    products.push_back({"lm_head_forward", rows, config.vocab_size, hidden, false, true, false});
    products.push_back({"lm_head_backward_input", rows, hidden, config.vocab_size, false, false, false});
    products.push_back({"lm_head_backward_weight", config.vocab_size, hidden, rows, true, false, true});
  }
  return products;
}

double flops_of(const Product& p) { return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k); }

/// Runs every product once on buffers of the right sizes; returns the seconds. In the step every
/// layer's weights and activations are its own, so a product reads its operands from memory, not
/// from the caches the product before left them in: the products whose operands fit a slot (the
/// layers') take the slots of a ring larger than the last-level cache in turn; the larger ones (the
/// LM head's, each operand larger than that cache by itself) share one set of buffers. (On one
/// shared set, every layer product found its operands in L3, and one thread ran 1-3 points of the
/// peak faster than on the ring.)
class ProductReplay {
 public:
  explicit ProductReplay(std::vector<Product> products) : products_(std::move(products)) {
    Sizes large, slot;
    for (const Product& p : products_) {
      const Sizes sizes = sizes_of(p);
      (fits_a_slot(sizes) ? slot : large).grow(sizes);
    }
    std::mt19937 rng(7);
    large_ = Operands(large, rng);
    for (Index s = 0; s < ring_slots; ++s) ring_.emplace_back(slot, rng);
  }

  /// The step's call: cpu::gemm on the pool (none at one thread).
  static auto ours(cpu::ThreadPool& pool) {
    cpu::ThreadPool* threads = pool.size() > 1 ? &pool : nullptr;
    return [threads](const Product& p, float* a, float* b, float* c) {
      const auto a_op = p.a_transposed ? cpu::transpose_of(a, p.m) : cpu::rows_of(a, p.k);
      const auto b_op = p.b_transposed ? cpu::transpose_of(b, p.k) : cpu::rows_of(b, p.n);
      cpu::gemm<float>(threads, p.m, p.n, p.k, a_op, b_op, c, p.n, p.accumulate);
    };
  }

  /// Seconds of the whole list through cpu::gemm; `seconds_by_part` gets each part's share added.
  double run(cpu::ThreadPool& pool, std::map<std::string, double>* seconds_by_part = nullptr) {
    std::size_t next_slot = 0;
    return run_range(0, products_.size(), next_slot, ours(pool), seconds_by_part);
  }

  /// Products [begin, end) through `multiply(product, a, b, c)`, operands from the ring from
  /// `next_slot` on (advanced past those used); returns the seconds.
  template <class Multiply>
  double run_range(std::size_t begin, std::size_t end, std::size_t& next_slot, const Multiply& multiply,
                   std::map<std::string, double>* seconds_by_part = nullptr) {
    const auto start = Clock::now();
    auto last = start;
    for (std::size_t i = begin; i < end; ++i) {
      const Product& p = products_[i];
      Operands& operands = operands_for(p, next_slot);
      multiply(p, operands.a.data(), operands.b.data(), operands.c.data());
      benchmark::DoNotOptimize(operands.c.data());
      if (seconds_by_part != nullptr) {
        const auto now = Clock::now();
        (*seconds_by_part)[p.part] += std::chrono::duration<double>(now - last).count();
        last = now;
      }
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  /// Each product twice on the same operands, only the second call timed: what of A, B and C fits
  /// the caches is there (against `run`: what the operands' trips to memory cost). Returns the
  /// timed seconds; `seconds_by_part` gets each part's share added.
  template <class Multiply>
  double run_warm(const Multiply& multiply, std::map<std::string, double>* seconds_by_part = nullptr) {
    double total = 0.0;
    std::size_t next_slot = 0;
    for (const Product& p : products_) {
      Operands& operands = operands_for(p, next_slot);
      multiply(p, operands.a.data(), operands.b.data(), operands.c.data());
      const auto start = Clock::now();
      multiply(p, operands.a.data(), operands.b.data(), operands.c.data());
      benchmark::DoNotOptimize(operands.c.data());
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      total += seconds;
      if (seconds_by_part != nullptr) (*seconds_by_part)[p.part] += seconds;
    }
    return total;
  }

  /// Runs of consecutive products of at least `min_flops` each (the last one may be smaller):
  /// [first, end) index pairs.
  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> groups(double min_flops) const {
    std::vector<std::pair<std::size_t, std::size_t>> runs;
    double flops = 0.0;
    std::size_t first = 0;
    for (std::size_t i = 0; i < products_.size(); ++i) {
      flops += flops_of(products_[i]);
      if (flops >= min_flops || i + 1 == products_.size()) {
        runs.emplace_back(first, i + 1);
        first = i + 1;
        flops = 0.0;
      }
    }
    return runs;
  }


  [[nodiscard]] std::map<std::string, double> flops_by_part() const {
    std::map<std::string, double> flops;
    for (const Product& p : products_) flops[p.part] += flops_of(p);
    return flops;
  }

  [[nodiscard]] double flops() const {
    double total = 0.0;
    for (const Product& p : products_) total += flops_of(p);
    return total;
  }

 private:
  struct Sizes {
    std::size_t a = 0, b = 0, c = 0;
    void grow(const Sizes& other) {
      a = std::max(a, other.a);
      b = std::max(b, other.b);
      c = std::max(c, other.c);
    }
  };
  struct Operands {
    std::vector<float> a, b, c;
    Operands() = default;
    Operands(const Sizes& sizes, std::mt19937& rng) : a(sizes.a), b(sizes.b), c(sizes.c, 0.0f) {
      std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
      for (auto& x : a) x = uniform(rng);
      for (auto& x : b) x = uniform(rng);
    }
  };
  /// Operands of at most 16 MiB each take ring slots. A SmolLM2 layer product touches 2-10 MiB
  /// of its slot, so 32 slots put 60 MiB or more (beyond a 32 MiB L3) between two uses of one.
  static constexpr std::size_t slot_max_floats = std::size_t{4} << 20;
  static constexpr Index ring_slots = 32;
  static Sizes sizes_of(const Product& p) {
    return {static_cast<std::size_t>(p.m * p.k), static_cast<std::size_t>(p.k * p.n), static_cast<std::size_t>(p.m * p.n)};
  }
  static bool fits_a_slot(const Sizes& s) {
    return s.a <= slot_max_floats && s.b <= slot_max_floats && s.c <= slot_max_floats;
  }
  /// The next ring slot (advancing `next_slot`) for a product that fits one, else the large set.
  Operands& operands_for(const Product& p, std::size_t& next_slot) {
    return fits_a_slot(sizes_of(p)) ? ring_[next_slot++ % ring_.size()] : large_;
  }

  std::vector<Product> products_;
  Operands large_;
  std::vector<Operands> ring_;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t half = values.size() / 2;
  return values.size() % 2 == 1 ? values[half] : 0.5 * (values[half - 1] + values[half]);
}

void BM_SftStep(benchmark::State& state) {
  const auto threads = static_cast<unsigned>(state.range(0));
  const HfModelConfig config = smollm2_135m_config();
  Transformer model = Transformer::random(config, {.seed = 1}, {.num_threads = threads});
  cpu::ThreadPool pool(threads);

  std::vector<TokenId> ids;
  std::vector<std::int64_t> offsets = {0};
  std::mt19937 rng(11);
  std::uniform_int_distribution<TokenId> token(0, static_cast<TokenId>(config.vocab_size - 1));
  for (Index s = 0; s < sequences; ++s) {
    for (Index t = 0; t < sequence_length; ++t) ids.push_back(token(rng));
    offsets.push_back(static_cast<std::int64_t>(ids.size()));
  }
  const auto batch = TokenBatch::packed(ids, offsets);
  const verl::MatrixI64 targets = next_token_targets(batch);
  const auto tokens = static_cast<Index>(ids.size());
  const std::vector<float> cotangent(ids.size(), -1.0f / static_cast<float>(ids.size()));  // mean NLL

  verl::optim::AdamW optimizer(verl::optim::AdamWConfig{.lr = 1e-5});
  std::vector<verl::optim::ParameterRef> parameters;
  model.zero_grad();
  model.for_each_parameter([&](const auto& p) { parameters.push_back({p.value, p.grad, p.name}); });

  std::vector<double> forward_s, backward_s, optimizer_s, step_s;
  auto one_step = [&] {
    const auto t0 = Clock::now();
    model.zero_grad();
    const auto out = model.forward(batch, {.targets = {targets.data(), ids.size()}, .keep_activations = true});
    const auto t1 = Clock::now();
    model.backward({.log_probs = cotangent});
    const auto t2 = Clock::now();
    (void)verl::optim::clip_and_step(optimizer, parameters, 1.0);
    const auto t3 = Clock::now();
    benchmark::DoNotOptimize(out.log_probs.data());
    forward_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    backward_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    optimizer_s.push_back(std::chrono::duration<double>(t3 - t2).count());
    step_s.push_back(std::chrono::duration<double>(t3 - t0).count());
  };
  one_step();  // warm-up: the first step faults in activations and the optimizer's moments
  forward_s.clear(), backward_s.clear(), optimizer_s.clear(), step_s.clear();

  ProductReplay replay(step_products(config, tokens));
  std::vector<double> products_s;
  (void)replay.run(pool);  // warm-up: packing buffers
  const double peak_before = fma_peak_gflops(pool, 20'000'000, 3);
  for (auto _ : state) {
    one_step();
    products_s.push_back(replay.run(pool));
  }
  // Each part's rate, from one more pass timed product by product (a clock read per product).
  std::map<std::string, double> part_seconds;
  (void)replay.run(pool, &part_seconds);
  const double peak = std::max(peak_before, fma_peak_gflops(pool, 20'000'000, 3));
  for (const auto& [part, flops] : replay.flops_by_part()) {
    state.counters[part + "_fraction_of_peak"] = flops / part_seconds[part] / 1e9 / peak;
  }
  const double step = median(step_s), products = median(products_s), optim = median(optimizer_s);
  const double product_rate = replay.flops() / products / 1e9;
  state.counters["threads"] = threads;
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["step_s"] = step;
  state.counters["forward_s"] = median(forward_s);
  state.counters["backward_s"] = median(backward_s);
  state.counters["clip_adamw_s"] = optim;
  state.counters["products_s"] = products;
  state.counters["rest_s"] = step - products - optim;
  state.counters["products_GFLOP"] = replay.flops() / 1e9;
  state.counters["products_GFLOP_per_s"] = product_rate;
  state.counters["fma_peak_GFLOP_per_s"] = peak;
  state.counters["products_fraction_of_peak"] = product_rate / peak;
  state.counters["step_products_fraction_of_peak"] = replay.flops() / step / 1e9 / peak;
  state.counters["tokens_per_s"] = static_cast<double>(tokens) / step;
  state.counters["parameters"] = static_cast<double>(verl::model::parameter_count(model));
}

/// The step's products alone (the same replay as BM_SftStep's, no model), each iteration one pass
/// over the whole list. Two processes of BM_StepProducts/1 side by side measure what two cores
/// give with no sharing and no synchronization between them (separate buffers, no pool): the
/// ceiling of BM_StepProducts/2 on this machine, against the one-core figure run alone.
void BM_StepProducts(benchmark::State& state) {
  const auto threads = static_cast<unsigned>(state.range(0));
  cpu::ThreadPool pool(threads);
  ProductReplay replay(step_products(smollm2_135m_config(), sequences * sequence_length));
  (void)replay.run(pool);  // warm-up: packing buffers
  const double peak_before = fma_peak_gflops(pool, 20'000'000, 3);
  std::vector<double> products_s;
  std::map<std::string, double> part_seconds;
  for (auto _ : state) products_s.push_back(replay.run(pool, &part_seconds));
  const double peak = std::max(peak_before, fma_peak_gflops(pool, 20'000'000, 3));
  const auto passes = static_cast<double>(products_s.size());
  for (const auto& [part, flops] : replay.flops_by_part()) {
    state.counters[part + "_fraction_of_peak"] = flops * passes / part_seconds[part] / 1e9 / peak;
  }
  state.counters["threads"] = threads;
  state.counters["products_s"] = median(products_s);
  state.counters["fma_peak_GFLOP_per_s"] = peak;
  state.counters["products_fraction_of_peak"] = replay.flops() / median(products_s) / 1e9 / peak;
}

/// A BLAS library loaded at run time, called through its Fortran sgemm_ (column-major): the
/// strongest peer of the step's products in the same process (BM_StepProductsVsBlas).
class BlasPeer {
 public:
  BlasPeer(const char* path, unsigned threads) : path_(path) {
    // An OpenMP runtime's threads otherwise spin after each call, on the core that our pool's next
    // product needs (our products at two threads ran at 0.5-0.9 of MKL's that way, 0.8-1.1 without).
    // Set before loading: the runtime reads it once. The user's own setting wins.
    setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
    handle_ = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) throw std::runtime_error(fmt::format("VERL_BENCH_BLAS={}: cannot load it: {}", path, dlerror()));
    sgemm_ = reinterpret_cast<Sgemm>(dlsym(handle_, "sgemm_"));
    if (sgemm_ == nullptr) {
      throw std::runtime_error(fmt::format("VERL_BENCH_BLAS={}: expected a BLAS library exporting sgemm_, found none", path));
    }
    // MKL's runtime library, OpenBLAS, then the MKL inside PyTorch (which exports only the local
    // form). C entry points only: the lower-case mkl_* names there take their argument by address.
    for (const char* name : {"MKL_Set_Num_Threads", "openblas_set_num_threads"}) {
      if (auto* set = reinterpret_cast<void (*)(int)>(dlsym(handle_, name))) {
        set(static_cast<int>(threads));
        return;
      }
    }
    if (auto* set = reinterpret_cast<int (*)(int)>(dlsym(handle_, "MKL_Set_Num_Threads_Local"))) {
      (void)set(static_cast<int>(threads));
      return;
    }
    throw std::runtime_error(fmt::format(
        "VERL_BENCH_BLAS={}: found no way to set its thread count to {} (MKL_Set_Num_Threads, "
        "openblas_set_num_threads, MKL_Set_Num_Threads_Local)",
        path, threads));
  }
  BlasPeer(const BlasPeer&) = delete;
  BlasPeer& operator=(const BlasPeer&) = delete;
  // The library stays loaded: unloading an OpenMP runtime with live threads is not safe.

  /// C (m x n, row-major) (+)= op(A) op(B), as the column-major product C^T = op(B)^T op(A)^T.
  /// Integers are passed as 64-bit values: an LP64 library reads their low half, an ILP64 one all.
  void multiply(const Product& p, const float* a, const float* b, float* c) const {
    const std::int64_t rows = p.n, cols = p.m, depth = p.k, ld_b = p.b_transposed ? p.k : p.n,
                       ld_a = p.a_transposed ? p.m : p.k, ld_c = p.n;
    const float one = 1.0f, beta = p.accumulate ? 1.0f : 0.0f;
    sgemm_(p.b_transposed ? "T" : "N", p.a_transposed ? "T" : "N", &rows, &cols, &depth, &one, b, &ld_b, a, &ld_a, &beta,
           c, &ld_c);
  }

  [[nodiscard]] const char* path() const { return path_; }

 private:
  using Sgemm = void (*)(const char*, const char*, const std::int64_t*, const std::int64_t*, const std::int64_t*,
                         const float*, const float*, const std::int64_t*, const float*, const std::int64_t*, const float*,
                         float*, const std::int64_t*);
  const char* path_;
  void* handle_ = nullptr;
  Sgemm sgemm_ = nullptr;
};

/// Largest |ours - peer| over largest |ours| on one product of each layout: a library whose
/// sgemm_ reads its arguments otherwise (or a wrong operand layout here) shows at once.
double peer_disagreement(const BlasPeer& peer, cpu::ThreadPool& pool) {
  double worst = 0.0;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const bool a_transposed : {false, true}) {
    for (const bool b_transposed : {false, true}) {
      const Product p{"check", 37, 53, 29, a_transposed, b_transposed, a_transposed};
      std::vector<float> a(static_cast<std::size_t>(p.m * p.k)), b(static_cast<std::size_t>(p.k * p.n)),
          c(static_cast<std::size_t>(p.m * p.n));
      for (auto& x : a) x = uniform(rng);
      for (auto& x : b) x = uniform(rng);
      for (auto& x : c) x = uniform(rng);
      std::vector<float> theirs = c;
      ProductReplay::ours(pool)(p, a.data(), b.data(), c.data());
      peer.multiply(p, a.data(), b.data(), theirs.data());
      double largest = 0.0, difference = 0.0;
      for (std::size_t i = 0; i < c.size(); ++i) {
        largest = std::max(largest, static_cast<double>(std::abs(c[i])));
        difference = std::max(difference, static_cast<double>(std::abs(c[i] - theirs[i])));
      }
      worst = std::max(worst, difference / std::max(largest, 1e-30));
    }
  }
  return worst;
}

/// The replay against a BLAS peer in one process (VERL_BENCH_BLAS, see the top of this file).
/// Loads the BLAS peer at `path` into `peer` and checks it against ours on the four operand
/// layouts; false (the benchmark skipped with the reason) when it cannot be loaded or disagrees.
bool load_checked_peer(benchmark::State& state, const char* path, unsigned threads, cpu::ThreadPool& pool,
                       std::optional<BlasPeer>& peer) {
  try {
    peer.emplace(path, threads);
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
    return false;
  }
  if (const double disagreement = peer_disagreement(*peer, pool); !(disagreement < 1e-5)) {
    state.SkipWithError(fmt::format("VERL_BENCH_BLAS={}: its sgemm_ disagrees with ours by {:.3g} of the largest value "
                                    "(expected under 1e-5: an sgemm_ with another interface?)",
                                    path, disagreement)
                            .c_str());
    return false;
  }
  return true;
}

/// Each pass runs the product list in groups of consecutive products of at least 2 GFLOP (tens of
/// milliseconds; a thread pool's spin after its last product is then under 1% of a group), ours
/// and the peer's each in turn, the first side alternating from group to group; each side reads
/// its own ring slots. Counters: both fractions of the FMA peak, ours_over_peer (the peer's
/// seconds over ours: above 1, ours is faster), and each part's.
void BM_StepProductsVsBlas(benchmark::State& state) {
  const char* path = std::getenv("VERL_BENCH_BLAS");
  if (path == nullptr || *path == '\0') {
    state.SkipWithError("VERL_BENCH_BLAS is not set: expected the path of a BLAS library exporting sgemm_ (see bench_train_step.cpp)");
    return;
  }
  const auto threads = static_cast<unsigned>(state.range(0));
  cpu::ThreadPool pool(threads);
  ProductReplay replay(step_products(smollm2_135m_config(), sequences * sequence_length));
  std::optional<BlasPeer> loaded;
  if (!load_checked_peer(state, path, threads, pool, loaded)) return;
  const BlasPeer& peer = *loaded;
  const auto ours = ProductReplay::ours(pool);
  auto theirs = [&peer](const Product& p, float* a, float* b, float* c) { peer.multiply(p, a, b, c); };
  const auto groups = replay.groups(2e9);
  std::map<std::string, double> ours_by_part, theirs_by_part;
  std::vector<double> ours_s, theirs_s;
  // One pass over the list; a timed pass records its seconds and each part's.
  auto pass = [&](bool timed) {
    double ours_total = 0.0, theirs_total = 0.0;
    std::size_t next_slot = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const auto [first, end] = groups[g];
      for (int side = 0; side < 2; ++side) {
        if ((side + static_cast<int>(g)) % 2 == 0) {
          ours_total += replay.run_range(first, end, next_slot, ours, timed ? &ours_by_part : nullptr);
        } else {
          theirs_total += replay.run_range(first, end, next_slot, theirs, timed ? &theirs_by_part : nullptr);
        }
      }
    }
    if (timed) {
      ours_s.push_back(ours_total);
      theirs_s.push_back(theirs_total);
    }
  };
  pass(false);  // warm-up: packing buffers, the peer's threads
  const double peak_before = fma_peak_gflops(pool, 20'000'000, 3);
  for (auto _ : state) pass(true);
  const double peak = std::max(peak_before, fma_peak_gflops(pool, 20'000'000, 3));
  for (const auto& [part, flops] : replay.flops_by_part()) {
    state.counters[part + "_ours_over_peer"] = theirs_by_part[part] / ours_by_part[part];
  }
  state.counters["threads"] = threads;
  state.counters["fma_peak_GFLOP_per_s"] = peak;
  state.counters["products_fraction_of_peak"] = replay.flops() / median(ours_s) / 1e9 / peak;
  state.counters["peer_products_fraction_of_peak"] = replay.flops() / median(theirs_s) / 1e9 / peak;
  std::vector<double> ratios;
  for (std::size_t i = 0; i < ours_s.size(); ++i) ratios.push_back(theirs_s[i] / ours_s[i]);
  state.counters["ours_over_peer"] = median(ratios);
  state.SetLabel(peer.path());
}

/// The replay with warm operands (ProductReplay::run_warm), ours and, when VERL_BENCH_BLAS names
/// a BLAS library, the peer's (BlasPeer) in the same pass. With BM_StepProducts and BM_TileKernel:
/// where the step's products lose the FMA peak (memory, packing and blocking, the micro-kernel).
void BM_StepProductsWarm(benchmark::State& state) {
  const auto threads = static_cast<unsigned>(state.range(0));
  cpu::ThreadPool pool(threads);
  ProductReplay replay(step_products(smollm2_135m_config(), sequences * sequence_length));
  std::optional<BlasPeer> peer;
  if (const char* path = std::getenv("VERL_BENCH_BLAS"); path != nullptr && *path != '\0') {
    if (!load_checked_peer(state, path, threads, pool, peer)) return;
  }
  const auto ours = ProductReplay::ours(pool);
  auto theirs = [&peer](const Product& p, float* a, float* b, float* c) { peer->multiply(p, a, b, c); };
  (void)replay.run_warm(ours);  // warm-up: packing buffers, the peer's threads
  if (peer) (void)replay.run_warm(theirs);
  const double peak_before = fma_peak_gflops(pool, 20'000'000, 3);
  std::vector<double> ours_s, theirs_s;
  std::map<std::string, double> part_seconds;
  for (auto _ : state) {
    ours_s.push_back(replay.run_warm(ours, &part_seconds));
    if (peer) theirs_s.push_back(replay.run_warm(theirs));
  }
  const double peak = std::max(peak_before, fma_peak_gflops(pool, 20'000'000, 3));
  const auto passes = static_cast<double>(ours_s.size());
  for (const auto& [part, flops] : replay.flops_by_part()) {
    state.counters[part + "_fraction_of_peak"] = flops * passes / part_seconds[part] / 1e9 / peak;
  }
  state.counters["threads"] = threads;
  state.counters["fma_peak_GFLOP_per_s"] = peak;
  state.counters["products_fraction_of_peak"] = replay.flops() / median(ours_s) / 1e9 / peak;
  if (peer) {
    state.counters["peer_products_fraction_of_peak"] = replay.flops() / median(theirs_s) / 1e9 / peak;
    state.SetLabel(peer->path());
  }
}

/// The 8 x 48 micro-kernel alone, one thread, on operands packed once and kept in cache: 24 A
/// micro-panels (a row block) against 10 B panels (an NC block) of the step's depth for k = 576,
/// C (192 x 480) added to. The ceiling of any blocking around this kernel on this core.
void BM_TileKernel(benchmark::State& state) {
#if VERL_HAS_X86_DISPATCH
  if (!__builtin_cpu_supports("avx512f")) {
    state.SkipWithError("BM_TileKernel runs the AVX-512 tile: this CPU has no avx512f");
    return;
  }
  namespace detail = cpu::gemm_detail;
  constexpr auto tile = detail::avx512_tile_8x48;
  constexpr Index mr = tile.mr, nr = tile.nr(), mc = tile.blocking.mc, nc = tile.blocking.nc;
  const Index kc = detail::kc_block_of(576);
  std::vector<float> a(static_cast<std::size_t>(mc * kc), 0.5f), b(static_cast<std::size_t>(kc * nc), 0.25f),
      c(static_cast<std::size_t>(mc * nc), 0.0f);
  auto block = [&] {
    for (Index i = 0; i < mc; i += mr) {
      for (Index j = 0; j < nc; j += nr) {
        // The products' own instantiation (sgemm_avx512_tile), with no next block to prefetch.
        detail::kernel_avx512<tile.vectors, mr, detail::kernel_b_prefetch_k, true>(
            kc, a.data() + i * kc, b.data() + j * kc, c.data() + i * nc + j, nc, true, mr, nr, {});
      }
    }
    benchmark::DoNotOptimize(c.data());
  };
  cpu::ThreadPool one(1);
  const double peak_before = fma_peak_gflops(one, 20'000'000, 3);
  block();
  const double block_flops = 2.0 * static_cast<double>(mc * nc * kc);
  constexpr int blocks_per_timing = 200;
  double best = 0.0;
  for (auto _ : state) {
    const auto start = Clock::now();
    for (int r = 0; r < blocks_per_timing; ++r) block();
    best = std::max(best, blocks_per_timing * block_flops / std::chrono::duration<double>(Clock::now() - start).count() / 1e9);
  }
  const double peak = std::max(peak_before, fma_peak_gflops(one, 20'000'000, 3));
  state.counters["kc"] = static_cast<double>(kc);
  state.counters["fma_peak_GFLOP_per_s"] = peak;
  state.counters["tile_kernel_fraction_of_peak"] = best / peak;
#else
  state.SkipWithError("BM_TileKernel runs the AVX-512 tile: x86-64 with GCC or Clang only");
#endif
}

}  // namespace

BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(2)->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SftStep)->Arg(1)->Arg(2)->Iterations(5)->UseRealTime()->Unit(benchmark::kSecond);
BENCHMARK(BM_StepProducts)->Arg(1)->Arg(2)->Iterations(5)->UseRealTime()->Unit(benchmark::kSecond);
BENCHMARK(BM_StepProductsVsBlas)->Arg(1)->Arg(2)->Iterations(5)->UseRealTime()->Unit(benchmark::kSecond);
BENCHMARK(BM_StepProductsWarm)->Arg(1)->Arg(2)->Iterations(5)->UseRealTime()->Unit(benchmark::kSecond);
BENCHMARK(BM_TileKernel)->Iterations(15)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
