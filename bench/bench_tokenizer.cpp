// Tokenizer throughput on ~1 MB of multilingual text (English, code, digits, CJK, emoji, RTL,
// combining marks, special tokens) with the GPT-2, Qwen2 and Llama-3 style tokenizers of
// tests/data/tokenizer, encode and decode. Each runs beside a naive reference written the way
// GPT-2's encoder.py reads: the same pre-tokenization, then per word a list of symbol strings
// and repeated scans for the lowest-ranked adjacent pair (a std::map keyed by string pairs),
// merging all its occurrences, no cache; decoding maps characters to bytes through a std::map.
// Items are bytes of text; the closing table prints naive / verl-cpp CPU time for every pair.

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "verl/tokenizer/byte_level.hpp"
#include "verl/tokenizer/hf_tokenizer.hpp"

using namespace verl;
using namespace verl::tokenizer;
namespace fs = std::filesystem;

namespace {

const fs::path data_dir = fs::path(__FILE__).parent_path() / ".." / "tests" / "data" / "tokenizer";

/// ~1 MB from the golden strings of a style (every script and special token they contain).
std::string make_corpus(const std::string& style) {
  std::ifstream in(data_dir / (style + ".golden.jsonl"));
  std::vector<std::string> texts;
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line);
    if (row.contains("text")) texts.push_back(row["text"].get<std::string>());
  }
  std::mt19937 gen(11);
  std::string corpus;
  while (corpus.size() < (1u << 20)) {
    corpus += texts[gen() % texts.size()];
    corpus += ' ';
  }
  return corpus;
}

/// The plain reference: same pre-tokenizer and added-token handling, textbook BPE per word.
class NaiveBpe {
 public:
  explicit NaiveBpe(const std::string& style) {
    std::ifstream in(data_dir / (style + ".tokenizer.json"));
    const auto json = nlohmann::json::parse(in);
    for (const auto& [token, id] : json["model"]["vocab"].items()) vocab_[token] = id.get<TokenId>();
    ignore_merges_ = json["model"].value("ignore_merges", false);
    int rank = 0;
    for (const auto& merge : json["model"]["merges"]) {
      std::pair<std::string, std::string> pair;
      if (merge.is_string()) {
        const auto text = merge.get<std::string>();
        pair = {text.substr(0, text.find(' ')), text.substr(text.find(' ') + 1)};
      } else {
        pair = {merge[0].get<std::string>(), merge[1].get<std::string>()};
      }
      ranks_[pair] = rank++;
    }
    tokenizer_ = HfTokenizer::from_json(json);
    for (const auto& token : tokenizer_.added_vocabulary().tokens()) {
      id_to_text_[token.id] = token.content;
    }
    for (const auto& [token, id] : vocab_) id_to_text_[id] = token;
    const auto& tables = verl::tokenizer::byte_level_tables();
    for (int b = 0; b < 256; ++b) char_to_byte_[tables.byte_to_char[static_cast<std::size_t>(b)]] = static_cast<char>(b);
  }

  std::vector<TokenId> encode(std::string_view text) const {
    std::vector<TokenId> ids;
    std::vector<TextSegment> segments;
    tokenizer_.added_vocabulary().split(text, false, segments);
    for (const auto& segment : segments) {
      if (segment.is_added_token()) {
        ids.push_back(segment.added_token_id);
        continue;
      }
      // (NFC is skipped here, which only favours the reference.)
      tokenizer_.pre_tokenizer().run(segment.text, [&](std::string_view word) { bpe(word, ids); });
    }
    return ids;
  }

  std::string decode(const std::vector<TokenId>& ids) const {
    std::string bytes;
    for (const TokenId id : ids) {
      const std::string& token = id_to_text_.at(id);
      std::string spelled;
      bool all_bytes = true;
      for (std::size_t pos = 0; pos < token.size() && all_bytes;) {
        const auto found = char_to_byte_.find(verl::tokenizer::detail::next_code_point(token, pos));
        if (found == char_to_byte_.end()) all_bytes = false; else spelled += found->second;
      }
      bytes += all_bytes ? spelled : token;
    }
    return verl::tokenizer::detail::utf8_lossy(bytes);
  }

 private:
  void bpe(std::string_view word, std::vector<TokenId>& ids) const {
    if (ignore_merges_) {
      if (const auto found = vocab_.find(std::string(word)); found != vocab_.end()) {
        ids.push_back(found->second);
        return;
      }
    }
    std::vector<std::string> symbols;
    for (std::size_t pos = 0; pos < word.size();) {
      const std::size_t begin = pos;
      pos += verl::tokenizer::detail::utf8_length(static_cast<unsigned char>(word[pos]));
      symbols.emplace_back(word.substr(begin, pos - begin));
    }
    while (symbols.size() > 1) {
      int best_rank = -1;
      std::pair<std::string, std::string> best;
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
        const auto found = ranks_.find({symbols[i], symbols[i + 1]});
        if (found != ranks_.end() && (best_rank < 0 || found->second < best_rank)) {
          best_rank = found->second;
          best = found->first;
        }
      }
      if (best_rank < 0) break;
      std::vector<std::string> merged;
      for (std::size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == best.first && symbols[i + 1] == best.second) {
          merged.push_back(symbols[i] + symbols[i + 1]);
          ++i;
        } else {
          merged.push_back(symbols[i]);
        }
      }
      symbols = std::move(merged);
    }
    for (const auto& symbol : symbols) ids.push_back(vocab_.at(symbol));
  }

  std::map<std::string, TokenId> vocab_;
  bool ignore_merges_ = false;
  std::map<std::pair<std::string, std::string>, int> ranks_;
  std::map<TokenId, std::string> id_to_text_;
  std::map<char32_t, char> char_to_byte_;
  HfTokenizer tokenizer_;
};

void bm_encode(benchmark::State& state, const std::string& style, bool naive) {
  const std::string corpus = make_corpus(style);
  const auto tokenizer = HfTokenizer::from_file(data_dir / (style + ".tokenizer.json"));
  const NaiveBpe reference(style);
  if (!naive && style != "qwen2" && reference.encode(corpus) != tokenizer.encode(corpus, false)) {
    state.SkipWithError("the naive reference disagrees with verl-cpp");
    return;
  }
  for (auto _ : state) {
    auto ids = naive ? reference.encode(corpus) : tokenizer.encode(corpus, false);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(corpus.size()));
}

void bm_decode(benchmark::State& state, const std::string& style, bool naive) {
  const std::string corpus = make_corpus(style);
  const auto tokenizer = HfTokenizer::from_file(data_dir / (style + ".tokenizer.json"));
  const NaiveBpe reference(style);
  const auto ids = tokenizer.encode(corpus, false);
  for (auto _ : state) {
    auto text = naive ? reference.decode(ids) : tokenizer.decode(ids, false);
    benchmark::DoNotOptimize(text.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(corpus.size()));
}

/// Console output plus, at the end, naive / verl-cpp for each pair of runs.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      times_[run.benchmark_name()] = run.GetAdjustedCPUTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void print_ratios() const {
    std::printf("\n%-40s %12s %12s\n", "naive / verl-cpp (same run, CPU time)", "verl-cpp ms", "ratio");
    for (const auto& [name, time] : times_) {
      const std::string suffix = "/verl_cpp";
      if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
      const std::string stem = name.substr(0, name.size() - suffix.size());
      const auto naive = times_.find(stem + "/naive");
      if (naive != times_.end()) std::printf("%-40s %12.2f %11.2fx\n", stem.c_str(), time, naive->second / time);
    }
  }

 private:
  std::map<std::string, double> times_;
};

}  // namespace

int main(int argc, char** argv) {
  for (const std::string style : {"gpt2", "qwen2", "llama3"}) {
    for (const bool naive : {false, true}) {
      const std::string variant = naive ? "/naive" : "/verl_cpp";
      benchmark::RegisterBenchmark(("encode/" + style + "/1MB" + variant).c_str(), bm_encode, style, naive)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("decode/" + style + "/1MB" + variant).c_str(), bm_decode, style, naive)
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  benchmark::Shutdown();
  return 0;
}
