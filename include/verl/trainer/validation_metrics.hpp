// verl's validation metrics (process_validation_metrics and the trainer's val-core / val-aux
// naming): per data source and per reward variable, the mean over each prompt's responses
// (mean@N), their spread (std@N) and, for N > 1, bootstrap estimates of best@n, worst@n and
// maj@n (majority vote over "pred") for n = 2, 4, 8, ... and N, averaged over prompts.
// Numbers agree with verl's bit for bit: numpy's summation order and its seeded legacy
// generator are reproduced (detail/numpy_reductions.hpp).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/trainer/detail/numpy_reductions.hpp"

namespace verl::trainer {

/// One reward variable per response: numbers (score, acc, ...) or strings (pred, ...).
using ValidationValues = std::variant<std::vector<double>, std::vector<std::string>>;
/// verl's reward_extra_infos_dict: variable name -> one value per response.
using ValidationInfos = std::map<std::string, ValidationValues, std::less<>>;
/// data source -> variable -> metric name ("mean@4", "best@2/std", ...) -> value.
using ValidationResults = std::map<std::string, std::map<std::string, std::map<std::string, double>>>;

namespace detail {

/// 2, 4, 8, ... below n, then n (nothing for a single response).
inline std::vector<std::size_t> bootstrap_sizes(std::size_t n) {
  std::vector<std::size_t> sizes;
  if (n <= 1) return sizes;
  for (std::size_t k = 2; k < n; k *= 2) sizes.push_back(k);
  sizes.push_back(n);
  return sizes;
}

/// The majority vote's value: the most frequent prediction (the first seen among ties) and the
/// value of its first occurrence.
inline double majority_value(std::span<const std::size_t> sample, std::span<const double> values,
                             std::span<const std::string> predictions) {
  std::vector<std::pair<std::string_view, std::pair<std::size_t, double>>> votes;  // pred -> (count, first value)
  for (const std::size_t i : sample) {
    auto found = std::find_if(votes.begin(), votes.end(), [&](const auto& v) { return v.first == predictions[i]; });
    if (found == votes.end()) {
      votes.emplace_back(predictions[i], std::pair{std::size_t{1}, values[i]});
    } else {
      ++found->second.first;
    }
  }
  auto best = votes.begin();
  for (auto it = votes.begin(); it != votes.end(); ++it)
    if (it->second.first > best->second.first) best = it;
  return best->second.second;
}

}  // namespace detail

inline ValidationResults process_validation_metrics(std::span<const std::string> data_sources,
                                                    std::span<const std::string> sample_uids,
                                                    const ValidationInfos& infos, std::uint32_t seed = 42) {
  VERL_CHECK_ARG(sample_uids.size() == data_sources.size(), "sample_uids: expected length {} (data_sources'), got {}",
                 data_sources.size(), sample_uids.size());
  for (const auto& [name, values] : infos) {
    const std::size_t size = std::visit([](const auto& v) { return v.size(); }, values);
    VERL_CHECK_ARG(size == data_sources.size(), "infos['{}']: expected length {} (data_sources'), got {}", name,
                   data_sources.size(), size);
  }
  constexpr std::size_t n_bootstrap = 1000;
  const auto* predictions = [&]() -> const std::vector<std::string>* {
    const auto found = infos.find("pred");
    return found == infos.end() ? nullptr : std::get_if<std::vector<std::string>>(&found->second);
  }();

  // Samples grouped by data source, then by prompt uid, both in order of first appearance.
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::vector<std::size_t>>>>> groups;
  for (std::size_t i = 0; i < data_sources.size(); ++i) {
    auto source = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == data_sources[i]; });
    if (source == groups.end()) source = groups.insert(groups.end(), {data_sources[i], {}});
    auto uid = std::find_if(source->second.begin(), source->second.end(),
                            [&](const auto& u) { return u.first == sample_uids[i]; });
    if (uid == source->second.end()) uid = source->second.insert(source->second.end(), {sample_uids[i], {}});
    uid->second.push_back(i);
  }

  std::map<std::pair<std::size_t, std::size_t>, std::vector<std::size_t>> index_cache;  // (N, n) -> draws
  auto bootstrap_indices = [&](std::size_t population, std::size_t subset) -> const std::vector<std::size_t>& {
    auto [it, inserted] = index_cache.try_emplace({population, subset});
    if (inserted) it->second = detail::numpy_legacy_choice(seed, population, n_bootstrap * subset);
    return it->second;
  };

  ValidationResults results;
  for (const auto& [source, uids] : groups) {
    // variable -> metric -> per-prompt values (in prompt order)
    std::map<std::string, std::map<std::string, std::vector<double>>> per_prompt;
    for (const auto& [uid, members] : uids) {
      for (const auto& [variable, column] : infos) {
        const auto* numbers = std::get_if<std::vector<double>>(&column);
        if (numbers == nullptr || members.empty()) continue;  // strings (e.g. pred) have no statistics
        std::vector<double> values;
        std::vector<std::string> preds;
        for (const std::size_t i : members) {
          values.push_back((*numbers)[i]);
          if (predictions != nullptr) preds.push_back((*predictions)[i]);
        }
        const std::size_t n = values.size();
        auto& metrics = per_prompt[variable];
        metrics[fmt::format("mean@{}", n)].push_back(detail::numpy_mean(values));
        if (n <= 1) continue;
        metrics[fmt::format("std@{}", n)].push_back(detail::numpy_std(values));
        for (const std::size_t k : detail::bootstrap_sizes(n)) {
          const auto& draws = bootstrap_indices(n, k);
          std::vector<double> best(n_bootstrap), worst(n_bootstrap), majority;
          for (std::size_t b = 0; b < n_bootstrap; ++b) {
            const std::span<const std::size_t> sample(draws.data() + b * k, k);
            double largest = values[sample[0]], smallest = values[sample[0]];
            for (const std::size_t i : sample) {
              largest = std::max(largest, values[i]);
              smallest = std::min(smallest, values[i]);
            }
            best[b] = largest;
            worst[b] = smallest;
            if (predictions != nullptr) majority.push_back(detail::majority_value(sample, values, preds));
          }
          metrics[fmt::format("best@{}/mean", k)].push_back(detail::numpy_mean(best));
          metrics[fmt::format("best@{}/std", k)].push_back(detail::numpy_std(best));
          metrics[fmt::format("worst@{}/mean", k)].push_back(detail::numpy_mean(worst));
          metrics[fmt::format("worst@{}/std", k)].push_back(detail::numpy_std(worst));
          if (predictions != nullptr) {
            metrics[fmt::format("maj@{}/mean", k)].push_back(detail::numpy_mean(majority));
            metrics[fmt::format("maj@{}/std", k)].push_back(detail::numpy_std(majority));
          }
        }
      }
    }
    for (const auto& [variable, metrics] : per_prompt) {
      for (const auto& [metric, values] : metrics) results[source][variable][metric] = detail::numpy_mean(values);
    }
  }
  return results;
}

/// The trainer's validation metrics: "val-core/<source>/<var>/<metric>" for the core variable
/// ("acc" if present, else "reward") at the largest N for mean / maj / best, "val-aux/..." for
/// everything else.
inline Metrics validation_metrics(const ValidationResults& results) {
  Metrics out;
  for (const auto& [source, variables] : results) {
    const std::string core = variables.contains("acc") ? "acc" : "reward";
    for (const auto& [variable, metrics] : variables) {
      std::size_t n_max = 0;
      for (const auto& [name, value] : metrics) {
        // "best@4/mean" -> 4
        std::string_view count = std::string_view(name).substr(name.rfind('@') + 1);
        count = count.substr(0, count.find('/'));
        std::size_t n = 0;
        std::from_chars(count.data(), count.data() + count.size(), n);
        n_max = std::max(n_max, n);
      }
      const std::string at_max = fmt::format("@{}", n_max);
      for (const auto& [name, value] : metrics) {
        const bool headline = name.starts_with("mean") || name.starts_with("maj") || name.starts_with("best");
        const bool is_core = variable == core && headline && name.find(at_max) != std::string::npos;
        out[fmt::format("{}/{}/{}/{}", is_core ? "val-core" : "val-aux", source, variable, name)] = value;
      }
    }
  }
  return out;
}

inline Metrics validation_metrics(std::span<const std::string> data_sources, std::span<const std::string> sample_uids,
                                  const ValidationInfos& infos, std::uint32_t seed = 42) {
  return validation_metrics(process_validation_metrics(data_sources, sample_uids, infos, seed));
}

}  // namespace verl::trainer
