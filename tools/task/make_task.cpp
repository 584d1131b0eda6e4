// verl_make_task: writes the built-in verifiable task (multi-digit addition graded by verl's gsm8k
// rule scorer) and the tiny model to start from. All logic lives in verl/data/tasks/arithmetic.hpp.
//
//   verl_make_task --out DIR [--seed S] [--train N] [--val M] [--digits D] [--operands K] [--sft-carry-slip P]
//                  [--prompt-style bare|instruct] [--no-model]
//                  [--hidden-size H] [--intermediate-size I] [--layers L] [--heads A] [--kv-heads G]
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "verl/trainer/tasks/arithmetic.hpp"

namespace {

constexpr std::string_view usage = R"(usage: verl_make_task --out DIR [options]

Writes DIR/train.jsonl and DIR/val.jsonl (verl's RLHF rows, data_source openai/gsm8k),
DIR/sft_train.jsonl and DIR/sft_val.jsonl (columns question / answer) and DIR/model (a tiny
Qwen2 with random weights, a byte-level tokenizer.json and a ChatML tokenizer_config.json;
not with --no-model).

  --seed S               problems and weights seed (default 1)
  --train N              training problems (default 2000)
  --val M                validation problems (default 200)
  --digits D             digits per operand: the difficulty (default 2)
  --operands K           numbers added (default 2)
  --sft-carry-slip P     probability that an SFT demonstration with a carry keeps only the sum's
                         last digit (an imperfect demonstrator; RL rows stay exact; default 0)
  --prompt-style S       bare: "37+85=" (default; the tiny model); instruct: a chat question for a
                         pretrained instruct model, 'What is 37 + 85? End your answer with
                         "#### " and the number.'
  --no-model             write no model folder (the run starts from a pretrained model)
  --hidden-size H        model width (default 64)
  --intermediate-size I  MLP width (default 192)
  --layers L             decoder layers (default 2)
  --heads A              attention heads (default 4)
  --kv-heads G           key/value heads (default 2)
)";

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
  using namespace verl::trainer::tasks;
  ArithmeticTaskOptions task;
  TinyModelOptions model;
  bool write_model = true;
  std::filesystem::path out;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) throw verl::InvalidArgument(fmt::format("{}: expected a value", flag));
      return argv[++i];
    };
    if (flag == "-h" || flag == "--help") {
      std::fputs(usage.data(), stdout);
      return 0;
    } else if (flag == "--out") {
      out = std::string(value());
    } else if (flag == "--seed") {
      task.seed = parse_number<std::uint64_t>(flag, value());
      model.seed = task.seed;
    } else if (flag == "--train") {
      task.train_size = parse_number<std::int64_t>(flag, value());
    } else if (flag == "--val") {
      task.val_size = parse_number<std::int64_t>(flag, value());
    } else if (flag == "--digits") {
      task.digits = parse_number<std::int64_t>(flag, value());
    } else if (flag == "--operands") {
      task.operands = parse_number<std::int64_t>(flag, value());
    } else if (flag == "--sft-carry-slip") {
      const std::string text(value());
      std::size_t used = 0;
      try {
        task.sft_carry_slip = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != text.size() || text.empty())
        throw verl::InvalidArgument(fmt::format("--sft-carry-slip: expected a probability, got '{}'", text));
    } else if (flag == "--prompt-style") {
      task.prompt_style = parse_arithmetic_prompt_style(value(), "--prompt-style");
    } else if (flag == "--no-model") {
      write_model = false;
    } else if (flag == "--hidden-size") {
      model.hidden_size = parse_number<std::int64_t>(flag, value());
    } else if (flag == "--intermediate-size") {
      model.intermediate_size = parse_number<std::int64_t>(flag, value());
    } else if (flag == "--layers") {
      model.num_hidden_layers = parse_number<std::int64_t>(flag, value());
    } else if (flag == "--heads") {
      model.num_attention_heads = parse_number<std::int64_t>(flag, value());
    } else if (flag == "--kv-heads") {
      model.num_key_value_heads = parse_number<std::int64_t>(flag, value());
    } else {
      throw verl::InvalidArgument(fmt::format("unknown flag '{}' (see --help)", flag));
    }
  }
  if (out.empty()) throw verl::InvalidArgument("--out: an output folder is required (see --help)");
  const ArithmeticTaskFiles files =
      write_arithmetic_task(out, task, write_model ? std::optional<TinyModelOptions>(model) : std::nullopt);
  fmt::print("verl_make_task: {} train / {} val problems ({} operands of {} digits) in {}; {}\n", task.train_size,
             task.val_size, task.operands, task.digits, out.string(),
             write_model ? "model in " + files.model.string() : std::string("no model (--no-model)"));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "verl_make_task: error: %s\n", error.what());
    return 1;
  }
}
