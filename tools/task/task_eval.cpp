// verl_task_eval: greedy accuracy of a Hugging Face model folder or a GGUF file on RLHF rows (JSON
// Lines), scored by verl's default_compute_score for each row's data_source.
//
//   verl_task_eval --model DIR|FILE.gguf --data FILE.jsonl [--max-new-tokens N] [--limit N] [--show K]
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "verl/trainer/tasks/greedy_accuracy.hpp"
#include "verl/trainer/policy_source.hpp"

namespace {

template <class T>
T parse_number(std::string_view flag, std::string_view text) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw verl::InvalidArgument(fmt::format("{}: expected an integer, got '{}'", flag, text));
  }
  return value;
}

int run(int argc, char** argv) {
  using namespace verl;
  std::filesystem::path model_dir, data_file;
  trainer::tasks::GreedyAccuracyOptions options;
  std::int64_t limit = -1, show = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) throw InvalidArgument(fmt::format("{}: expected a value", flag));
      return argv[++i];
    };
    if (flag == "--model") {
      model_dir = std::string(value());
    } else if (flag == "--data") {
      data_file = std::string(value());
    } else if (flag == "--max-new-tokens") {
      options.max_new_tokens = parse_number<std::int64_t>(flag, value());
    } else if (flag == "--limit") {
      limit = parse_number<std::int64_t>(flag, value());
    } else if (flag == "--show") {
      show = parse_number<std::int64_t>(flag, value());
    } else {
      throw InvalidArgument(fmt::format(
          "unknown flag '{}' (usage: verl_task_eval --model DIR|FILE.gguf --data FILE.jsonl [--max-new-tokens N] "
          "[--limit N] "
          "[--show K])",
          flag));
    }
  }
  if (model_dir.empty() || data_file.empty())
    throw InvalidArgument("--model DIR|FILE.gguf and --data FILE.jsonl are required");
  auto policy = trainer::load_policy(model_dir, "--model");
  const auto tokenizer = trainer::load_policy_tokenizer(model_dir);
  auto rows = trainer::tasks::read_rlhf_rows(data_file);
  if (limit > 0 && static_cast<std::size_t>(limit) < rows.size()) rows.resize(static_cast<std::size_t>(limit));
  const auto result = trainer::tasks::greedy_accuracy(policy, tokenizer, rows, options);
  for (std::int64_t i = 0; i < show && i < result.count; ++i) {
    fmt::print("  {} -> {:?}\n", rows[static_cast<std::size_t>(i)].prompt.back().content,
               result.responses[static_cast<std::size_t>(i)]);
  }
  fmt::print("accuracy {:.4f} ({} prompts, greedy)\n", result.mean_score, result.count);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "verl_task_eval: error: %s\n", error.what());
    return 1;
  }
}
