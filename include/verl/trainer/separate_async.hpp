// verl 0.9.1's separate_async mode (trainer.v1.trainer_mode=separate_async) for a controller
// program: a rollout pool of its own is kept busy with prompts sent ahead of the trainer, the
// trainer takes one PPO mini-batch at a time as the rollout finishes it and updates on it at
// once, and after parameter_sync_step mini-batches (one global step) the actor's weights replace
// the rollout's. Prompts sent more than trainer.v1.sampler.max_off_policy_threshold steps before
// they would be trained are dropped and replaced by fresh ones (max_off_policy_strategy=drop), as
// verl's ReplayBufferAsync does.
//
//   RolloutQueue<Future> queue(settings, next_prompt_batch, send);    // send: posts generate_sequences
//   queue.send_warmup(step, version);                                  // on_train_begin
//   queue.send_batch(step, version);                                   // every step's prepare_step
//   for (i < parameter_sync_step) { auto chunk = queue.take(step, version, evictions); ... chunk.pending.get() ... }
//
// The order of calls makes it deterministic: calls reaching the rollout's ranks run in the order
// they were sent, so a chunk sent after the weight sync of step k is generated with version k
// however fast either pool is. What a run trains on does not depend on timing; only how long the
// trainer waits does (timing_s/gen).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/trainer/config/ppo_config.hpp"

namespace verl::trainer {

/// The keys separate_async acts on, checked (config validation checks them too, with the rest).
struct SeparateAsyncSettings {
  std::int64_t parameter_sync_step = 4;       ///< mini-batches (updates) per global step
  std::int64_t num_warmup_batches = 1;        ///< batches sent before the first step
  std::int64_t max_off_policy_threshold = 8;  ///< the most steps a prompt may span, sent to trained
  bool drop_stale = true;                     ///< max_off_policy_strategy: drop (else wait)
  std::int64_t mini_batch_prompts = 1;        ///< actor_rollout_ref.actor.ppo_mini_batch_size

  [[nodiscard]] static SeparateAsyncSettings from_config(const PPOConfig& config) {
    const auto& v1 = config.trainer.v1;
    SeparateAsyncSettings s;
    s.parameter_sync_step = v1.separate_async.parameter_sync_step;
    s.num_warmup_batches = v1.separate_async.num_warmup_batches;
    s.max_off_policy_threshold = v1.sampler.max_off_policy_threshold;
    s.drop_stale = v1.sampler.max_off_policy_strategy == "drop";
    s.mini_batch_prompts = config.actor_rollout_ref.actor.ppo_mini_batch_size;
    VERL_CHECK_ARG(s.parameter_sync_step >= 1, "trainer.v1.separate_async.parameter_sync_step: expected >= 1, got {}",
                   s.parameter_sync_step);
    VERL_CHECK_ARG(s.num_warmup_batches >= 0, "trainer.v1.separate_async.num_warmup_batches: expected >= 0, got {}",
                   s.num_warmup_batches);
    VERL_CHECK_ARG(s.max_off_policy_threshold >= 1, "trainer.v1.sampler.max_off_policy_threshold: expected >= 1, got {}",
                   s.max_off_policy_threshold);
    VERL_CHECK_ARG(v1.sampler.max_off_policy_strategy == "drop" || v1.sampler.max_off_policy_strategy == "wait",
                   "trainer.v1.sampler.max_off_policy_strategy: expected drop or wait, got '{}'",
                   v1.sampler.max_off_policy_strategy);
    VERL_CHECK_ARG(s.mini_batch_prompts >= 1, "actor_rollout_ref.actor.ppo_mini_batch_size: expected >= 1, got {}",
                   s.mini_batch_prompts);
    VERL_CHECK_ARG(config.data.train_batch_size == s.parameter_sync_step * s.mini_batch_prompts,
                   "data.train_batch_size: expected trainer.v1.separate_async.parameter_sync_step x "
                   "actor_rollout_ref.actor.ppo_mini_batch_size = {} x {} = {}, got {}",
                   s.parameter_sync_step, s.mini_batch_prompts, s.parameter_sync_step * s.mini_batch_prompts,
                   config.data.train_batch_size);
    VERL_CHECK_ARG(s.drop_stale || s.num_warmup_batches + 1 <= s.max_off_policy_threshold,
                   "trainer.v1.sampler.max_off_policy_threshold: with max_off_policy_strategy=wait every batch is trained "
                   "num_warmup_batches + 1 = {} steps after it is sent; expected >= {}, got {}",
                   s.num_warmup_batches + 1, s.num_warmup_batches + 1, s.max_off_policy_threshold);
    return s;
  }
};

/// One mini-batch of prompts sent to the rollout pool.
template <class Pending>
struct RolloutChunk {
  std::vector<std::int64_t> indices;  ///< dataset rows, in order
  std::int64_t sent_at_step = 0;      ///< the global step it was sent in (verl's prompt_global_steps)
  std::int64_t weight_version = 0;    ///< the rollout's weights when it runs: the step of the last sync sent before it
  std::uint64_t seed = 0;             ///< the seed base of the batch it belongs to
  std::int64_t first = 0;             ///< its first prompt's position in that batch (prompt k draws from (seed, first + k))
  Pending pending;                    ///< the generation's answer, when it comes

  /// verl's span: the steps from being sent to being trained at `step`, both counted.
  [[nodiscard]] std::int64_t span_at(std::int64_t step) const { return step - sent_at_step + 1; }
};

/// What was dropped while taking chunks (verl's training/off_policy/evicted_samples*).
struct Evictions {
  std::int64_t prompts = 0;
  std::vector<double> spans;  ///< one per dropped prompt

  void add_to(Metrics& metrics) const {
    if (prompts == 0) return;
    metrics["training/off_policy/evicted_samples"] = static_cast<double>(prompts);
    double sum = 0, lo = spans.front(), hi = spans.front();
    for (const double s : spans) {
      sum += s;
      lo = std::min(lo, s);
      hi = std::max(hi, s);
    }
    metrics["training/off_policy/evicted_samples_staleness/mean"] = sum / static_cast<double>(spans.size());
    metrics["training/off_policy/evicted_samples_staleness/max"] = hi;
    metrics["training/off_policy/evicted_samples_staleness/min"] = lo;
  }
};

template <class Pending>
concept AwaitedAnswer = requires(Pending& p) { p.get(); };

/// The prompts in flight on the rollout pool, oldest first (verl's ReplayBufferAsync for a pool
/// whose calls run in order). `Pending` is what sending a chunk returns (a runtime's Future).
template <AwaitedAnswer Pending>
class RolloutQueue {
 public:
  using Chunk = RolloutChunk<Pending>;
  /// Sends dataset[indices] to the rollout, prompt k drawing from (seed, first + k); returns the
  /// answer to come.
  using Send = std::function<Pending(std::span<const std::int64_t> indices, std::uint64_t seed, std::int64_t first)>;
  /// The seed base of the k-th batch (or replacement chunk) sent during `step` (k from 1). A
  /// batch's chunks share it, so that with no warm-up the prompts draw what the synchronous
  /// step's one generation call gives them.
  using SeedOf = std::function<std::uint64_t(std::int64_t step, std::int64_t k)>;

  RolloutQueue(SeparateAsyncSettings settings, std::function<std::vector<std::int64_t>()> next_prompt_batch, Send send,
               SeedOf seed_of)
      : settings_(settings), next_prompt_batch_(std::move(next_prompt_batch)), send_(std::move(send)), seed_of_(std::move(seed_of)) {}

  /// verl's on_train_begin: num_warmup_batches batches before the first step.
  void send_warmup(std::int64_t step, std::int64_t weight_version) {
    for (std::int64_t b = 0; b < settings_.num_warmup_batches; ++b) send_batch(step, weight_version);
  }

  /// verl's prepare_step: one training batch (data.train_batch_size prompts) as
  /// parameter_sync_step mini-batch chunks.
  void send_batch(std::int64_t step, std::int64_t weight_version) {
    const std::uint64_t seed = next_seed(step);
    for (std::int64_t c = 0; c < settings_.parameter_sync_step; ++c)
      send_chunk(step, weight_version, seed, c * settings_.mini_batch_prompts);
  }

  /// The oldest chunk still to be trained at `step`. With drop, chunks in front sent more than
  /// max_off_policy_threshold steps before are dropped (their answers awaited and discarded: a
  /// sent call cannot be recalled) and as many fresh prompts sent in their place, counted in
  /// `evictions`. The returned chunk's answer may still be on its way.
  Chunk take(std::int64_t step, std::int64_t weight_version, Evictions& evictions) {
    for (;;) {
      VERL_CHECK_ARG(!chunks_.empty(), "separate_async: no prompts in flight at step {} (send_batch first)", step);
      Chunk& front = chunks_.front();
      const std::int64_t span = front.span_at(step);
      if (span <= settings_.max_off_policy_threshold || !settings_.drop_stale) {
        Chunk out = std::move(front);
        chunks_.pop_front();
        return out;
      }
      front.pending.get();
      evictions.prompts += static_cast<std::int64_t>(front.indices.size());
      evictions.spans.insert(evictions.spans.end(), front.indices.size(), static_cast<double>(span));
      chunks_.pop_front();
      send_chunk(step, weight_version, next_seed(step), 0);
    }
  }

  [[nodiscard]] std::size_t chunks_in_flight() const { return chunks_.size(); }
  [[nodiscard]] const std::deque<Chunk>& chunks() const { return chunks_; }
  /// The chunks in flight, oldest first (a checkpoint settles their answers).
  [[nodiscard]] std::deque<Chunk>& chunks() { return chunks_; }

  /// Where the queue stands in the prompt stream and the seeds (for a checkpoint).
  struct Position {
    std::vector<std::int64_t> prompts;  ///< loaded from the data loader, not yet sent
    std::int64_t seeding_step = std::numeric_limits<std::int64_t>::min();
    std::int64_t sent_this_step = 0;
  };
  [[nodiscard]] Position position() const { return {{prompts_.begin(), prompts_.end()}, seeding_step_, sent_this_step_}; }

  /// Puts back a checkpoint's chunks (answers settled) and position.
  void restore(std::deque<Chunk> chunks, const Position& position) {
    chunks_ = std::move(chunks);
    prompts_.assign(position.prompts.begin(), position.prompts.end());
    seeding_step_ = position.seeding_step;
    sent_this_step_ = position.sent_this_step;
  }
  [[nodiscard]] const SeparateAsyncSettings& settings() const { return settings_; }

  /// Awaits every answer still coming (before the runtime shuts down).
  void drain() {
    for (auto& chunk : chunks_) chunk.pending.get();
    chunks_.clear();
  }

 private:
  std::uint64_t next_seed(std::int64_t step) {
    if (step != seeding_step_) {
      seeding_step_ = step;
      sent_this_step_ = 0;
    }
    return seed_of_(step, ++sent_this_step_);
  }

  void send_chunk(std::int64_t step, std::int64_t weight_version, std::uint64_t seed, std::int64_t first) {
    std::vector<std::int64_t> indices = take_prompts(settings_.mini_batch_prompts);
    Pending pending = send_(indices, seed, first);
    chunks_.push_back(Chunk{std::move(indices), step, weight_version, seed, first, std::move(pending)});
  }

  std::vector<std::int64_t> take_prompts(std::int64_t count) {
    std::vector<std::int64_t> out;
    while (static_cast<std::int64_t>(out.size()) < count) {
      if (prompts_.empty()) {
        const std::vector<std::int64_t> batch = next_prompt_batch_();
        VERL_CHECK_ARG(!batch.empty(), "separate_async: the train data loader gave an empty batch");
        prompts_.insert(prompts_.end(), batch.begin(), batch.end());
      }
      out.push_back(prompts_.front());
      prompts_.pop_front();
    }
    return out;
  }

  SeparateAsyncSettings settings_;
  std::function<std::vector<std::int64_t>()> next_prompt_batch_;
  Send send_;
  SeedOf seed_of_;
  std::deque<Chunk> chunks_;
  std::deque<std::int64_t> prompts_;  ///< loaded from the data loader, not yet sent
  std::int64_t seeding_step_ = std::numeric_limits<std::int64_t>::min();
  std::int64_t sent_this_step_ = 0;
};

/// verl's training/off_policy/trajectory_* metrics of the rows trained at `step`, from the weight
/// versions each row was generated with (min/max_global_steps: equal here, no partial rollouts).
inline Metrics trajectory_staleness_metrics(std::span<const std::int64_t> min_versions,
                                            std::span<const std::int64_t> max_versions, std::int64_t step) {
  VERL_CHECK_ARG(min_versions.size() == max_versions.size() && !min_versions.empty(),
                 "trajectory_staleness_metrics: expected as many min as max versions (and some), got {} and {}",
                 min_versions.size(), max_versions.size());
  Metrics out;
  const auto add = [&](std::string_view name, auto value_of) {
    double sum = 0, lo = 0, hi = 0;
    for (std::size_t i = 0; i < min_versions.size(); ++i) {
      const double v = value_of(i);
      sum += v;
      lo = i == 0 ? v : std::min(lo, v);
      hi = i == 0 ? v : std::max(hi, v);
    }
    out[fmt::format("training/off_policy/{}/mean", name)] = sum / static_cast<double>(min_versions.size());
    out[fmt::format("training/off_policy/{}/max", name)] = hi;
    out[fmt::format("training/off_policy/{}/min", name)] = lo;
  };
  add("trajectory_spans", [&](std::size_t i) { return static_cast<double>(max_versions[i] - min_versions[i] + 1); });
  add("trajectory_staleness", [&](std::size_t i) { return static_cast<double>((step - 1) - max_versions[i]); });
  add("trajectory_staleness_worst", [&](std::size_t i) { return static_cast<double>((step - 1) - min_versions[i]); });
  return out;
}

/// verl's MetricsAggregator (trainer/ppo/v1/utils.py): the metrics of a step's mini-batch updates
/// combined into the step's. Counts of evicted samples add up; the step and learning rates keep
/// the last value; timings add up; names with max / min keep the extreme; sum / total add up;
/// the rest is the mean weighted by each update's sample count.
class MetricsAggregator {
 public:
  void add(const Metrics& metrics, std::int64_t samples) {
    for (const auto& [key, value] : metrics) values_[key].push_back({value, static_cast<double>(samples)});
  }

  [[nodiscard]] Metrics aggregated() const {
    Metrics out;
    for (const auto& [key, entries] : values_) out[key] = combine(key, entries);
    return out;
  }

 private:
  struct Entry {
    double value;
    double weight;
  };
  enum class Rule { sum, last, max, min, weighted_mean };

  static bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }
  static bool ends_with(std::string_view text, std::string_view end) {
    return text.size() >= end.size() && text.substr(text.size() - end.size()) == end;
  }

  static Rule rule_of(std::string_view key) {
    if (ends_with(key, "/off_policy/evicted_samples") || ends_with(key, "/filter_groups/evicted_samples") ||
        ends_with(key, "/rollout_failure/evicted_samples"))
      return Rule::sum;
    std::string lower(key);
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower == "training/global_step" || lower == "training/rollout_probs_diff_valid" || ends_with(lower, "/lr") ||
        ends_with(lower, "_lr") || lower == "lr")
      return Rule::last;
    if (contains(lower, "timing_s/") || contains(lower, "timing_per_token_ms/")) return Rule::sum;
    if (contains(lower, "max")) return Rule::max;
    if (contains(lower, "min")) return Rule::min;
    if (contains(lower, "sum") || contains(lower, "total")) return Rule::sum;
    return Rule::weighted_mean;
  }

  static double combine(std::string_view key, const std::vector<Entry>& entries) {
    switch (rule_of(key)) {
      case Rule::sum: {
        double s = 0;
        for (const auto& e : entries) s += e.value;
        return s;
      }
      case Rule::last: return entries.back().value;
      case Rule::max: {
        double m = entries.front().value;
        for (const auto& e : entries) m = std::max(m, e.value);
        return m;
      }
      case Rule::min: {
        double m = entries.front().value;
        for (const auto& e : entries) m = std::min(m, e.value);
        return m;
      }
      case Rule::weighted_mean: break;
    }
    double sum = 0, weights = 0;
    for (const auto& e : entries) {
      sum += e.value * e.weight;
      weights += e.weight;
    }
    if (weights > 0) return sum / weights;
    double plain = 0;
    for (const auto& e : entries) plain += e.value;
    return plain / static_cast<double>(entries.size());
  }

  std::map<std::string, std::vector<Entry>, std::less<>> values_;
};

}  // namespace verl::trainer
