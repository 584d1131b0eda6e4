// The reference transformer under Ulysses sequence parallelism, without MPI: sp "ranks" run as
// threads, each with its own copy of the model, and exchange through shared memory. Their
// gathered log-probs, entropy and logits must be the sp = 1 model's, and the sum of their
// parameter gradients its gradients (double: to rounding; float: within 1e-4 relative).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <barrier>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "verl/model/causal_lm.hpp"
#include "verl/model/transformer/critic.hpp"
#include "verl/model/transformer/sequence_parallel_regions.hpp"
#include "verl/model/transformer/transformer.hpp"

namespace {

using verl::Index;
using verl::MatrixF;
using verl::MatrixI64;
using verl::RowMatrix;
using namespace verl::model;

/// The sp ranks' shared memory: each posts its block, waits for the others, reads theirs, waits
/// again before the next exchange may overwrite the blocks.
template <class Scalar>
struct SharedExchange {
  explicit SharedExchange(int size) : blocks(static_cast<std::size_t>(size)), barrier(size) {}
  std::vector<RowMatrix<Scalar>> blocks;
  std::barrier<> barrier;
};

template <class Scalar>
class ThreadRegions final : public SequenceParallelRegions<Scalar> {
 public:
  ThreadRegions(SharedExchange<Scalar>& shared, int rank) : shared_(&shared), rank_(rank) {}
  [[nodiscard]] int size() const override { return static_cast<int>(shared_->blocks.size()); }
  [[nodiscard]] int rank() const override { return rank_; }

  RowMatrix<Scalar> gather_seq_scatter_heads(const RowMatrix<Scalar>& x, Index heads) override {
    EXPECT_EQ(heads % size(), 0);
    const Index width = x.cols() / size(), local = x.rows();
    return exchange(x, [&] {
      RowMatrix<Scalar> out(local * size(), width);
      for (int i = 0; i < size(); ++i) out.middleRows(i * local, local) = block(i).middleCols(rank_ * width, width);
      return out;
    });
  }
  RowMatrix<Scalar> gather_heads_scatter_seq(const RowMatrix<Scalar>& x, Index heads) override {
    EXPECT_EQ(heads % size(), 0);
    const Index width = x.cols(), local = x.rows() / size();
    return exchange(x, [&] {
      RowMatrix<Scalar> out(local, width * size());
      for (int i = 0; i < size(); ++i) out.middleCols(i * width, width) = block(i).middleRows(rank_ * local, local);
      return out;
    });
  }
  RowMatrix<Scalar> all_gather_rows(const RowMatrix<Scalar>& x) override {
    return exchange(x, [&] {
      RowMatrix<Scalar> out(x.rows() * size(), x.cols());
      for (int i = 0; i < size(); ++i) out.middleRows(i * x.rows(), x.rows()) = block(i);
      return out;
    });
  }

 private:
  const RowMatrix<Scalar>& block(int i) const { return shared_->blocks[static_cast<std::size_t>(i)]; }
  template <class Read>
  RowMatrix<Scalar> exchange(const RowMatrix<Scalar>& mine, Read read) {
    shared_->blocks[static_cast<std::size_t>(rank_)] = mine;
    shared_->barrier.arrive_and_wait();
    RowMatrix<Scalar> out = read();
    shared_->barrier.arrive_and_wait();
    return out;
  }
  SharedExchange<Scalar>* shared_;
  int rank_;
};

/// Qwen3-style: q/k norms, attention biases, GQA (4 query heads over 2 KV heads: sp = 4 repeats
/// them), a sliding window on the second layer; untied head.
HfModelConfig sp_config(Index kv_heads = 2, Index heads = 4) {
  const nlohmann::json json = {{"model_type", "qwen3"},      {"hidden_size", 8},          {"intermediate_size", 12},
                               {"num_hidden_layers", 2},     {"num_attention_heads", heads},  {"num_key_value_heads", kv_heads},
                               {"head_dim", 4},              {"vocab_size", 23},          {"rms_norm_eps", 1e-5},
                               {"max_position_embeddings", 64}, {"attention_bias", true}, {"rope_theta", 1e4},
                               {"use_sliding_window", true}, {"sliding_window", 3},       {"max_window_layers", 1},
                               {"tie_word_embeddings", false}};
  return HfModelConfig::from_json(json, "sequence-parallel test config");
}

template <class Model>
void randomize(Model& model, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  model.for_each_parameter([&](const auto& p) {
    const bool norm = p.name.ends_with("norm.weight");
    for (auto& v : p.value) v = static_cast<std::remove_cvref_t<decltype(v)>>(norm ? 1.0 + 0.2 * normal(rng) : 0.5 * normal(rng));
  });
}

/// Rows of different valid lengths (15 tokens: not a multiple of 2 or 4, so the slices are padded).
TokenBatch sp_batch() {
  MatrixI64 ids(3, 7);
  MatrixF mask(3, 7);
  ids << 0, 0, 5, 9, 3, 17, 2,  //
      1, 4, 8, 22, 6, 0, 0,     //
      0, 7, 7, 13, 10, 11, 0;
  mask << 0, 0, 1, 1, 1, 1, 1,  //
      1, 1, 1, 1, 1, 0, 0,      //
      0, 1, 1, 1, 1, 1, 0;
  return TokenBatch::padded(ids, mask);
}

template <class Scalar>
struct Pass {
  CausalLMOutput<Scalar> out;
  std::vector<std::vector<Scalar>> grads;  ///< per parameter
};

/// forward with targets, entropy and logits, then backward with fixed cotangents.
template <class Scalar>
Pass<Scalar> run_pass(BasicTransformer<Scalar>& model, const TokenBatch& batch) {
  const MatrixI64 targets = next_token_targets(batch);
  const Index slots = batch.layout_size(), vocab = model.vocab_size();
  std::vector<Scalar> w(static_cast<std::size_t>(slots)), u(w.size()), c(static_cast<std::size_t>(slots * vocab));
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (auto& x : w) x = static_cast<Scalar>(normal(rng));
  for (auto& x : u) x = static_cast<Scalar>(0.3 * normal(rng));
  for (auto& x : c) x = static_cast<Scalar>(0.05 * normal(rng));
  Pass<Scalar> pass;
  model.zero_grad();
  pass.out = model.forward(batch, {.targets = {targets.data(), static_cast<std::size_t>(targets.size())},
                                   .return_logits = true,
                                   .return_entropy = true,
                                   .return_sum_pi_squared = true,
                                   .temperature = 0.8f,
                                   .keep_activations = true});
  model.backward({.log_probs = w, .entropy = u, .logits = c});
  model.for_each_parameter([&](const auto& p) { pass.grads.emplace_back(p.grad.begin(), p.grad.end()); });
  return pass;
}

template <class A, class B>
double max_relative_difference(const A& a, const B& b, double floor) {
  double worst = 0;
  for (Index i = 0; i < static_cast<Index>(a.size()); ++i) {
    const double x = static_cast<double>(a.data()[i]), y = static_cast<double>(b.data()[i]);
    worst = std::max(worst, std::abs(x - y) / std::max(floor, std::abs(y)));
  }
  return worst;
}

template <class Scalar>
void expect_sequence_parallel_matches_dense(int sp, Index kv_heads, double tolerance) {
  const TokenBatch batch = sp_batch();
  BasicTransformer<Scalar> dense(sp_config(kv_heads), {.num_threads = 1});
  randomize(dense, 5);
  const Pass<Scalar> expected = run_pass(dense, batch);

  SharedExchange<Scalar> shared(sp);
  std::vector<Pass<Scalar>> passes(static_cast<std::size_t>(sp));
  std::vector<std::thread> ranks;
  for (int r = 0; r < sp; ++r) {
    ranks.emplace_back([&, r] {
      BasicTransformer<Scalar> model(sp_config(kv_heads), {.num_threads = 1});
      randomize(model, 5);
      ThreadRegions<Scalar> regions(shared, r);
      model.set_sequence_parallel(&regions);
      passes[static_cast<std::size_t>(r)] = run_pass(model, batch);
    });
  }
  for (auto& t : ranks) t.join();

  for (int r = 0; r < sp; ++r) {
    const auto& out = passes[static_cast<std::size_t>(r)].out;
    EXPECT_LE(max_relative_difference(out.log_probs, expected.out.log_probs, 1e-3), tolerance) << "rank " << r;
    EXPECT_LE(max_relative_difference(out.entropy, expected.out.entropy, 1e-3), tolerance) << "rank " << r;
    EXPECT_LE(max_relative_difference(out.sum_pi_squared, expected.out.sum_pi_squared, 1e-3), tolerance) << "rank " << r;
    EXPECT_LE(max_relative_difference(out.logits, expected.out.logits, 1e-3), tolerance) << "rank " << r;
    // Every rank returns the same gathered results, bit for bit.
    EXPECT_EQ(out.log_probs, passes[0].out.log_probs) << "rank " << r;
    EXPECT_EQ(out.entropy, passes[0].out.entropy) << "rank " << r;
  }
  for (std::size_t p = 0; p < expected.grads.size(); ++p) {
    std::vector<double> sum(expected.grads[p].size(), 0.0);
    bool partial = false;  // each rank holds only its tokens' share of some gradient
    for (const auto& pass : passes) {
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += static_cast<double>(pass.grads[p][i]);
      partial = partial || pass.grads[p] != expected.grads[p];
    }
    double scale = 0;
    for (const auto g : expected.grads[p]) scale = std::max(scale, std::abs(static_cast<double>(g)));
    double worst = 0;
    for (std::size_t i = 0; i < sum.size(); ++i)
      worst = std::max(worst, std::abs(sum[i] - static_cast<double>(expected.grads[p][i])) / std::max(scale, 1e-6));
    EXPECT_LE(worst, tolerance) << "parameter " << p;
    if (scale > 0) EXPECT_TRUE(partial) << "parameter " << p << ": no rank split its tokens";
  }
}

TEST(TransformerSequenceParallel, TwoRanksMatchTheDenseModelInDouble) {
  expect_sequence_parallel_matches_dense<double>(2, 2, 1e-10);
}

TEST(TransformerSequenceParallel, FourRanksRepeatTheKeyValueHeadsAndMatchInDouble) {
  expect_sequence_parallel_matches_dense<double>(4, 2, 1e-10);
}

TEST(TransformerSequenceParallel, FourRanksOneKeyValueHeadMatchInFloat) {
  expect_sequence_parallel_matches_dense<float>(4, 1, 1e-4);
}

// The critic: values gathered over the ranks, gradients summed over them.
TEST(TransformerSequenceParallel, CriticValuesAndGradientsMatchTheDenseCritic) {
  const TokenBatch batch = sp_batch();
  std::vector<double> cotangent(static_cast<std::size_t>(batch.layout_size()));
  for (std::size_t i = 0; i < cotangent.size(); ++i) cotangent[i] = std::sin(static_cast<double>(i) + 0.5);
  const auto pass = [&](BasicTransformerCritic<double>& critic) {
    critic.zero_grad();
    std::pair<RowMatrix<double>, std::vector<double>> out;
    out.first = critic.forward(batch, {.keep_activations = true}).values;
    critic.backward({.values = cotangent});
    critic.for_each_parameter([&](const auto& p) { out.second.insert(out.second.end(), p.grad.begin(), p.grad.end()); });
    return out;
  };
  BasicTransformerCritic<double> dense(sp_config(2), {.num_threads = 1});
  randomize(dense, 9);
  const auto expected = pass(dense);
  constexpr int sp = 4;
  SharedExchange<double> shared(sp);
  std::vector<std::pair<RowMatrix<double>, std::vector<double>>> got(sp);
  std::vector<std::thread> ranks;
  for (int r = 0; r < sp; ++r) {
    ranks.emplace_back([&, r] {
      BasicTransformerCritic<double> critic(sp_config(2), {.num_threads = 1});
      randomize(critic, 9);
      ThreadRegions<double> regions(shared, r);
      critic.set_sequence_parallel(&regions);
      got[static_cast<std::size_t>(r)] = pass(critic);
    });
  }
  for (auto& t : ranks) t.join();
  std::vector<double> summed(expected.second.size(), 0.0);
  for (const auto& [values, grads] : got) {
    EXPECT_LE(max_relative_difference(values, expected.first, 1e-3), 1e-10);
    EXPECT_NE(grads, expected.second);  // a rank holds its tokens' share only
    for (std::size_t i = 0; i < grads.size(); ++i) summed[i] += grads[i];
  }
  EXPECT_LE(max_relative_difference(summed, expected.second, 1e-3), 1e-9);
}

TEST(TransformerSequenceParallel, RefusesHeadsThatDoNotSplit) {
  const auto message = [](const HfModelConfig& config, int sp) -> std::string {
    BasicTransformer<float> model(config, {.num_threads = 1});
    SharedExchange<float> shared(sp);
    ThreadRegions<float> regions(shared, 0);
    try {
      model.set_sequence_parallel(&regions);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no error";
  };
  // 3 ranks do not split 4 query heads.
  EXPECT_NE(message(sp_config(2), 3).find("num_attention_heads 4 must be a multiple of the sequence-parallel size 3"),
            std::string::npos);
  // 6 query heads over 3 KV heads: 2 ranks split the query heads, but neither 3 nor 2 divides the other.
  EXPECT_NE(message(sp_config(3, 6), 2).find("num_key_value_heads 3 must be a multiple or a divisor of the "
                                             "sequence-parallel size 2"),
            std::string::npos);
  // 2 KV heads over 4 ranks: repeated, accepted.
  EXPECT_EQ(message(sp_config(2), 4), "no error");
}

}  // namespace
