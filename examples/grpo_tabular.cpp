// The main job until the trainer lands: a complete GRPO loop composed from the library's parts on
// a synthetic task, printing verl's metrics each step.
//
// Task: for prompt p the answer is the number (3p + 1) mod 10; a response is up to T tokens over
// the vocabulary {0..9, ' ', '.', EOS} and is scored by verl's gsm8k scorer (flexible extraction:
// the last number in the text must equal the answer). The policy is a table of logits, one row
// per (prompt, position): small enough to train in seconds, real enough to exercise sampling,
// rewards, GRPO advantages, the PPO clipped objective with a k3 KL loss and an entropy bonus,
// the fused log-prob/entropy kernel and its backward pass.
//
//   verl_example_grpo [key=value ...]   verl-style overrides, e.g.
//     algorithm.adv_estimator=rloo actor_rollout_ref.rollout.n=8 trainer.total_training_steps=40
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "verl/algo/actor_objective.hpp"
#include "verl/algo/advantages/registry.hpp"
#include "verl/algo/functional.hpp"
#include "verl/algo/kl/penalty.hpp"
#include "verl/algo/logits/logprob_entropy.hpp"
#include "verl/algo/masked_stats.hpp"
#include "verl/algo/policy_losses.hpp"
#include "verl/reward/gsm8k.hpp"

using namespace verl;
using namespace verl::algo;

namespace {

constexpr std::int64_t kSpace = 10, kDot = 11, kEos = 12, kVocab = 13;

struct Settings {
  std::string adv_estimator = "grpo";
  int prompts_per_step = 16;   // data.train_batch_size
  int n = 8;                   // actor_rollout_ref.rollout.n
  int response_length = 6;     // data.max_response_length
  int num_prompts = 10;        // size of the synthetic dataset
  int steps = 60;              // trainer.total_training_steps
  double lr = 50;              // actor_rollout_ref.actor.optim.lr (plain SGD on the logits table)
  double clip_ratio = 0.2;
  double kl_loss_coef = 0.001;
  double entropy_coeff = 0.0;
  std::uint64_t seed = 1;

  void apply(const std::string& override_text) {
    const auto eq = override_text.find('=');
    VERL_CHECK_ARG(eq != std::string::npos, "override '{}': expected key=value", override_text);
    const std::string key = override_text.substr(0, eq), value = override_text.substr(eq + 1);
    const std::map<std::string, std::function<void()>> setters = {
        {"algorithm.adv_estimator", [&] { adv_estimator = value; }},
        {"data.train_batch_size", [&] { prompts_per_step = std::stoi(value); }},
        {"actor_rollout_ref.rollout.n", [&] { n = std::stoi(value); }},
        {"data.max_response_length", [&] { response_length = std::stoi(value); }},
        {"trainer.total_training_steps", [&] { steps = std::stoi(value); }},
        {"actor_rollout_ref.actor.optim.lr", [&] { lr = std::stod(value); }},
        {"actor_rollout_ref.actor.clip_ratio", [&] { clip_ratio = std::stod(value); }},
        {"actor_rollout_ref.actor.kl_loss_coef", [&] { kl_loss_coef = std::stod(value); }},
        {"actor_rollout_ref.actor.entropy_coeff", [&] { entropy_coeff = std::stod(value); }},
        {"trainer.seed", [&] { seed = std::stoull(value); }},
    };
    const auto it = setters.find(key);
    if (it == setters.end()) {
      std::string known;
      for (const auto& [k, _] : setters) known += (known.empty() ? "" : ", ") + k;
      verl::detail::throw_invalid_argument("override '{}': unknown key; this example accepts {}", key, known);
    }
    it->second();
  }
};

std::string decode(const std::int64_t* tokens, Index length) {
  std::string text;
  for (Index t = 0; t < length && tokens[t] != kEos; ++t)
    text += tokens[t] < 10 ? static_cast<char>('0' + tokens[t]) : (tokens[t] == kSpace ? ' ' : '.');
  return text;
}

/// Min/mean/max of the valid entries, under verl's metric names.
void add_stats(Metrics& metrics, const std::string& prefix, const MatrixF& values, const MatrixF& mask) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (Index i = 0; i < values.rows(); ++i)
    for (Index j = 0; j < values.cols(); ++j)
      if (mask(i, j) != 0) {
        lo = std::min<double>(lo, values(i, j));
        hi = std::max<double>(hi, values(i, j));
      }
  metrics[prefix + "/mean"] = masked_mean(values, mask);
  metrics[prefix + "/max"] = hi;
  metrics[prefix + "/min"] = lo;
}

}  // namespace

int main(int argc, char** argv) try {
  Settings cfg;
  for (int i = 1; i < argc; ++i) cfg.apply(argv[i]);

  const AnyAdvantageEstimator estimator = make_advantage_estimator(cfg.adv_estimator);
  VERL_CHECK_ARG(!estimator.needs_critic() && !estimator.needs_reward_baseline() && !estimator.needs_old_log_probs(),
                 "algorithm.adv_estimator: this example has no critic, greedy baseline or sum_pi_squared; got '{}'",
                 estimator.name());

  const Index T = cfg.response_length, V = kVocab;
  const Index B = static_cast<Index>(cfg.prompts_per_step) * cfg.n;
  std::mt19937_64 rng(cfg.seed);

  // Policy and frozen reference: one logits row per (prompt, position).
  MatrixF policy = MatrixF::Zero(cfg.num_prompts * T, V);
  const MatrixF reference = policy;
  ActorObjective<VanillaPPO, KLLoss<LowVarKL>, TokenMean> objective{
      .policy_loss = {.clip_ratio_low = cfg.clip_ratio, .clip_ratio_high = cfg.clip_ratio},
      .kl_loss = {.coef = cfg.kl_loss_coef},
      .entropy_coeff = cfg.entropy_coeff};

  fmt::print("verl-cpp {} — GRPO on a synthetic gsm8k-scored task: {} prompts x n={} per step, T={}, V={}, estimator={}\n",
             version_string, cfg.prompts_per_step, cfg.n, T, V, estimator.name());
  double first_score = 0, last_score = 0;
  for (int step = 1; step <= cfg.steps; ++step) {
    const auto t_step = std::chrono::steady_clock::now();
    Metrics metrics;
    auto timed = [&](const char* name, auto&& fn) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      metrics[std::string("timing_s/") + name] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };

    // ---- generate: n samples per prompt from softmax(logits) ----
    std::vector<std::int64_t> prompt_of(static_cast<std::size_t>(B)), uid(static_cast<std::size_t>(B));
    MatrixI64 responses(B, T);
    MatrixF rows(B * T, V);  // the logits each sampled token was drawn from
    timed("gen", [&] {
      std::uniform_int_distribution<int> pick_prompt(0, cfg.num_prompts - 1);
      for (int p = 0; p < cfg.prompts_per_step; ++p) {
        const int prompt = pick_prompt(rng);
        for (int k = 0; k < cfg.n; ++k) {
          const Index i = static_cast<Index>(p) * cfg.n + k;
          prompt_of[static_cast<std::size_t>(i)] = prompt;
          uid[static_cast<std::size_t>(i)] = p;
          for (Index t = 0; t < T; ++t) {
            rows.row(i * T + t) = policy.row(prompt * T + t);
            const Eigen::ArrayXf logits = policy.row(prompt * T + t).transpose().array();
            const Eigen::ArrayXf probs = (logits - logits.maxCoeff()).exp();
            std::discrete_distribution<int> sample(probs.data(), probs.data() + probs.size());
            responses(i, t) = sample(rng);
          }
        }
      }
    });
    const MatrixF mask = get_response_mask<float>(responses, kEos);
    const std::span<const std::int64_t> labels(responses.data(), static_cast<std::size_t>(responses.size()));

    // ---- reward: verl's gsm8k scorer, placed on the last valid token ----
    MatrixF scores = MatrixF::Zero(B, T);
    VectorF sequence_score(B);
    timed("reward", [&] {
      for (Index i = 0; i < B; ++i) {
        const std::string answer = std::to_string((3 * prompt_of[static_cast<std::size_t>(i)] + 1) % 10);
        const double s = reward::gsm8k::compute_score(decode(&responses(i, 0), T), answer,
                                                       reward::gsm8k::ExtractMethod::flexible);
        const Index last = static_cast<Index>(mask.row(i).sum()) - 1;
        scores(i, last) = static_cast<float>(s);
        sequence_score[i] = static_cast<float>(s);
      }
    });

    // ---- old and reference log-probs (the fused kernel reads each logits row once) ----
    MatrixF old_log_prob(B, T), ref_log_prob(B, T);
    timed("old_log_prob", [&] {
      const auto fwd = fused_logprob_entropy(rows, labels);
      old_log_prob = Eigen::Map<const MatrixF>(fwd.log_probs.data(), B, T);
    });
    timed("ref", [&] {
      MatrixF ref_rows(B * T, V);
      for (Index i = 0; i < B; ++i)
        for (Index t = 0; t < T; ++t) ref_rows.row(i * T + t) = reference.row(prompt_of[static_cast<std::size_t>(i)] * T + t);
      const auto fwd = fused_logprob_entropy(ref_rows, labels);
      ref_log_prob = Eigen::Map<const MatrixF>(fwd.log_probs.data(), B, T);
    });

    // ---- advantages ----
    AdvantageResult adv;
    timed("adv", [&] { adv = estimator.compute({.token_level_rewards = scores, .response_mask = mask, .index = uid}); });

    // ---- actor update: one PPO epoch, one mini-batch ----
    timed("update_actor", [&] {
      const auto fwd = fused_logprob_entropy(rows, labels);
      const MatrixF log_prob = Eigen::Map<const MatrixF>(fwd.log_probs.data(), B, T);
      const MatrixF entropy = Eigen::Map<const MatrixF>(fwd.entropy.data(), B, T);
      const auto out = objective.compute({.policy = {.old_log_prob = old_log_prob, .log_prob = log_prob,
                                                     .advantages = adv.advantages, .response_mask = mask},
                                          .ref_log_prob = ConstMatrixRefF(ref_log_prob),
                                          .entropy = ConstMatrixRefF(entropy)});
      const MatrixF grad_rows = fused_logprob_entropy_backward(
          rows, labels, fwd,
          {.log_probs = std::span<const float>(out.grad_log_prob.data(), static_cast<std::size_t>(out.grad_log_prob.size())),
           .entropy = out.grad_entropy.size() ? std::span<const float>(out.grad_entropy.data(), static_cast<std::size_t>(out.grad_entropy.size()))
                                              : std::span<const float>{}});
      MatrixF grad = MatrixF::Zero(policy.rows(), V);
      for (Index i = 0; i < B; ++i)
        for (Index t = 0; t < T; ++t) grad.row(prompt_of[static_cast<std::size_t>(i)] * T + t) += grad_rows.row(i * T + t);
      metrics["actor/grad_norm"] = grad.norm();
      policy -= static_cast<float>(cfg.lr) * grad;
      for (const auto& [k, v] : out.metrics) metrics[k] = v;
    });
    metrics["actor/lr"] = cfg.lr;

    // ---- data metrics, as verl's compute_data_metrics names them ----
    const MatrixF ones = MatrixF::Ones(B, 1);
    metrics["critic/score/mean"] = sequence_score.mean();
    metrics["critic/score/max"] = sequence_score.maxCoeff();
    metrics["critic/score/min"] = sequence_score.minCoeff();
    add_stats(metrics, "critic/advantages", adv.advantages, mask);
    add_stats(metrics, "critic/returns", adv.returns(), mask);
    const MatrixF lengths = mask.rowwise().sum();
    add_stats(metrics, "response_length", lengths, ones);
    metrics["response_length/clip_ratio"] = (lengths.array() == static_cast<float>(T)).cast<double>().mean();
    metrics["training/global_step"] = step;
    metrics["timing_s/step"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_step).count();

    if (step == 1) first_score = metrics["critic/score/mean"];
    last_score = metrics["critic/score/mean"];
    std::string line = fmt::format("step:{}", step);
    for (const char* key : {"critic/score/mean", "critic/advantages/max", "actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl",
                            "actor/entropy", "actor/kl_loss", "actor/grad_norm", "response_length/mean", "timing_s/step"})
      line += fmt::format(" - {}:{:.4g}", key, metrics[key]);
    fmt::print("{}\n", line);
  }
  fmt::print("mean score: {:.3f} at step 1 -> {:.3f} at step {}\n", first_score, last_score, cfg.steps);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "verl_example_grpo: %s\n", e.what());
  return 2;
}
