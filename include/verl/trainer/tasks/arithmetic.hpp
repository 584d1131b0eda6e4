// A built-in verifiable task for the main job: multi-digit addition ("37+85=" -> "#### 122"),
// written in verl's row schema with data_source "openai/gsm8k" so that verl's gsm8k rule scorer
// grades it, plus SFT pairs and a tiny byte-level Qwen2 model folder to start from.
//
// Two ways of asking: `bare` ("37+85=", for the tiny model that learns the format from SFT) and
// `instruct`, a chat question for a pretrained instruct model that asks for the answer in the
// scorer's strict format ('What is 37 + 85? End your answer with "#### " and the number.'), as
// verl's gsm8k preprocessing appends its instruction to each question.
//
// Difficulty is the number of digits of each operand (and the number of operands): a tiny
// transformer learns one-digit sums in seconds and needs far longer for carries over several
// digits. Train and validation problems are disjoint (a problem is its operand tuple), so
// validation measures what was learned, not what was memorized.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/data/jsonl.hpp"
#include "verl/data/random_permutation.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/core/file_io.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/tokenizer/byte_level.hpp"

namespace verl::trainer::tasks {

/// The data source verl's default_compute_score routes to its gsm8k scorer.
inline constexpr std::string_view arithmetic_data_source = "openai/gsm8k";

/// How a problem is put to the model.
enum class ArithmeticPromptStyle {
  bare,      ///< "37+85=": the tiny model's prompt (it learns the answer format from the SFT pairs)
  instruct,  ///< a chat question that asks for the answer after "####" (a pretrained instruct model)
};

/// The instruction `instruct` prompts end with: the gsm8k scorer's strict format. (SmolLM2-135M-Instruct
/// answers "80 + 32 = 112." to the bare question, and often adds "#### 112" when asked this way.)
inline constexpr std::string_view arithmetic_instruction =
    "End your answer with \"#### \" and the number.";

/// "bare" or "instruct"; `key` names the setting in the error.
inline ArithmeticPromptStyle parse_arithmetic_prompt_style(std::string_view text, std::string_view key) {
  if (text == "bare") return ArithmeticPromptStyle::bare;
  if (text == "instruct") return ArithmeticPromptStyle::instruct;
  throw InvalidArgument(fmt::format("{}: expected bare or instruct, got '{}'", key, text));
}

struct ArithmeticTaskOptions {
  std::int64_t digits = 2;     ///< digits of each operand: operands are drawn from [0, 10^digits)
  std::int64_t operands = 2;   ///< how many numbers are added
  std::int64_t train_size = 2000;
  std::int64_t val_size = 200;
  std::uint64_t seed = 1;
  /// The SFT demonstrations come from an imperfect demonstrator: for a problem whose sum has
  /// more than one digit, it writes only the last digit (forgets the carry) with this
  /// probability. The RL rows always carry the true answer, so the rule-based reward can teach
  /// what the demonstrations got wrong (what RL with verifiable rewards is for).
  double sft_carry_slip = 0.0;
  ArithmeticPromptStyle prompt_style = ArithmeticPromptStyle::bare;

  /// 10^(digits * operands).
  [[nodiscard]] double distinct_problems() const {
    return std::pow(10.0, static_cast<double>(digits * operands));
  }

  void validate() const {
    VERL_CHECK_ARG(digits >= 1 && digits <= 9, "digits: expected 1 to 9 digits per operand, got {}", digits);
    VERL_CHECK_ARG(operands >= 2 && operands <= 8, "operands: expected 2 to 8 operands, got {}", operands);
    VERL_CHECK_ARG(train_size >= 1, "train_size: expected at least 1 problem, got {}", train_size);
    VERL_CHECK_ARG(val_size >= 1, "val_size: expected at least 1 problem, got {}", val_size);
    VERL_CHECK_ARG(sft_carry_slip >= 0.0 && sft_carry_slip <= 1.0,
                   "sft_carry_slip: expected a probability in [0, 1], got {}", sft_carry_slip);
    const double distinct = distinct_problems();
    VERL_CHECK_ARG(static_cast<double>(train_size + val_size) <= distinct,
                   "train_size + val_size: expected at most the {} distinct problems ({} operands of {} digits), "
                   "got {}",
                   distinct, operands, digits, train_size + val_size);
  }
};

struct ArithmeticProblem {
  std::vector<std::int64_t> operands;
  [[nodiscard]] std::int64_t answer() const {
    std::int64_t sum = 0;
    for (const auto v : operands) sum += v;
    return sum;
  }
  /// The user message: "37+85=" (bare), or 'What is 37 + 85? End your answer ...' (instruct).
  [[nodiscard]] std::string question(ArithmeticPromptStyle style = ArithmeticPromptStyle::bare) const {
    if (style == ArithmeticPromptStyle::instruct)
      return fmt::format("What is {}? {}", fmt::join(operands, " + "), arithmetic_instruction);
    return fmt::format("{}=", fmt::join(operands, "+"));
  }
  /// The reference response in GSM8K's answer format (the scorer reads the number after "#### ").
  [[nodiscard]] std::string response() const { return fmt::format("#### {}", answer()); }
  friend bool operator==(const ArithmeticProblem&, const ArithmeticProblem&) = default;
  friend auto operator<=>(const ArithmeticProblem&, const ArithmeticProblem&) = default;
};

struct ArithmeticSplits {
  std::vector<ArithmeticProblem> train;
  std::vector<ArithmeticProblem> val;
};

/// Distinct problems, the same for the same options.
inline ArithmeticSplits generate_arithmetic_problems(const ArithmeticTaskOptions& options) {
  options.validate();
  std::mt19937_64 engine = data::seeded_engine(options.seed);
  std::uint64_t bound = 1;
  for (std::int64_t i = 0; i < options.digits; ++i) bound *= 10;
  const std::int64_t wanted = options.train_size + options.val_size;
  std::vector<ArithmeticProblem> drawn;
  auto decode = [&](std::uint64_t code) {
    ArithmeticProblem problem;
    for (std::int64_t i = 0; i < options.operands; ++i, code /= bound)
      problem.operands.push_back(static_cast<std::int64_t>(code % bound));
    return problem;
  };
  if (static_cast<double>(wanted) * 2.0 > options.distinct_problems()) {
    // Dense: a random permutation of every problem (rejection sampling would stall).
    const auto order = data::random_permutation(static_cast<std::int64_t>(options.distinct_problems()), engine);
    for (std::int64_t i = 0; i < wanted; ++i) drawn.push_back(decode(static_cast<std::uint64_t>(order[static_cast<std::size_t>(i)])));
  } else {
    std::set<ArithmeticProblem> seen;
    while (static_cast<std::int64_t>(drawn.size()) < wanted) {
      ArithmeticProblem problem;
      for (std::int64_t i = 0; i < options.operands; ++i)
        problem.operands.push_back(static_cast<std::int64_t>(data::uniform_below(engine, bound)));
      if (seen.insert(problem).second) drawn.push_back(std::move(problem));
    }
  }
  ArithmeticSplits splits;
  splits.train.assign(drawn.begin(), drawn.begin() + options.train_size);
  splits.val.assign(drawn.begin() + options.train_size, drawn.end());
  return splits;
}

/// One row in verl's RLHF schema (what examples/data_preprocess/gsm8k.py writes).
inline nlohmann::json rl_row(const ArithmeticProblem& problem, std::string_view split, std::int64_t index,
                             ArithmeticPromptStyle style = ArithmeticPromptStyle::bare) {
  const std::string question = problem.question(style);
  return {{"data_source", arithmetic_data_source},
          {"prompt", nlohmann::json::array({{{"role", "user"}, {"content", question}}})},
          {"ability", "math"},
          {"reward_model", {{"style", "rule"}, {"ground_truth", std::to_string(problem.answer())}}},
          {"extra_info", {{"split", split}, {"index", index}, {"answer", problem.response()}, {"question", question}}}};
}

/// One SFT row: verl's SFT dataset reads the prompt and the response from the columns named by
/// data.prompt_key and data.response_key (defaults "question" and "answer"). `slip`: the
/// demonstrator forgot the carry and wrote only the sum's last digit.
inline nlohmann::json sft_row(const ArithmeticProblem& problem, bool slip = false,
                              ArithmeticPromptStyle style = ArithmeticPromptStyle::bare) {
  return {{"question", problem.question(style)},
          {"answer", slip ? fmt::format("#### {}", problem.answer() % 10) : problem.response()}};
}

// ---- the initial model folder -------------------------------------------------------------------

/// Special tokens after the 256 byte tokens, in id order.
inline constexpr std::array<std::string_view, 3> byte_tokenizer_special_tokens = {"<|endoftext|>", "<|im_start|>",
                                                                                   "<|im_end|>"};
inline constexpr std::int64_t byte_tokenizer_vocab_size = 256 + byte_tokenizer_special_tokens.size();

/// ChatML without a default system turn (short prompts for a tiny model).
inline constexpr std::string_view chatml_jinja =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// A Hugging Face tokenizers file: byte-level BPE with the 256 byte symbols (token id = byte
/// value) and no merges, so every byte is one token; special tokens follow.
inline nlohmann::json byte_level_tokenizer_json() {
  const auto& tables = tokenizer::byte_level_tables();
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<std::size_t>(b);
    vocab[std::string(tables.byte_to_utf8[byte].data(), tables.byte_to_utf8_length[byte])] = b;
  }
  nlohmann::json added = nlohmann::json::array();
  for (std::size_t i = 0; i < byte_tokenizer_special_tokens.size(); ++i) {
    added.push_back({{"id", 256 + static_cast<std::int64_t>(i)},
                     {"content", byte_tokenizer_special_tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", nullptr},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", nlohmann::json::array()}}}};
}

inline nlohmann::json byte_level_tokenizer_config(std::int64_t model_max_length) {
  nlohmann::json decoder = nlohmann::json::object();
  for (std::size_t i = 0; i < byte_tokenizer_special_tokens.size(); ++i) {
    decoder[std::to_string(256 + i)] = {{"content", byte_tokenizer_special_tokens[i]},
                                        {"lstrip", false},
                                        {"normalized", false},
                                        {"rstrip", false},
                                        {"single_word", false},
                                        {"special", true}};
  }
  return {{"tokenizer_class", "PreTrainedTokenizerFast"},
          {"added_tokens_decoder", decoder},
          {"chat_template", chatml_jinja},
          {"model_max_length", model_max_length},
          {"clean_up_tokenization_spaces", false},
          {"bos_token", nullptr},
          {"eos_token", "<|im_end|>"},
          {"pad_token", "<|endoftext|>"}};
}

/// The shape of the initial policy (Qwen2 architecture).
struct TinyModelOptions {
  std::int64_t hidden_size = 64;
  std::int64_t intermediate_size = 192;
  std::int64_t num_hidden_layers = 2;
  std::int64_t num_attention_heads = 4;
  std::int64_t num_key_value_heads = 2;
  std::int64_t max_position_embeddings = 64;
  double initializer_range = 0.02;
  std::uint64_t seed = 1;
};

inline model::HfModelConfig tiny_qwen2_config(const TinyModelOptions& options) {
  const nlohmann::json json = {{"architectures", {"Qwen2ForCausalLM"}},
                               {"model_type", "qwen2"},
                               {"hidden_size", options.hidden_size},
                               {"intermediate_size", options.intermediate_size},
                               {"num_hidden_layers", options.num_hidden_layers},
                               {"num_attention_heads", options.num_attention_heads},
                               {"num_key_value_heads", options.num_key_value_heads},
                               {"max_position_embeddings", options.max_position_embeddings},
                               {"vocab_size", byte_tokenizer_vocab_size},
                               {"rms_norm_eps", 1e-6},
                               {"rope_theta", 10000.0},
                               {"hidden_act", "silu"},
                               {"tie_word_embeddings", true},
                               {"use_sliding_window", false},
                               {"initializer_range", options.initializer_range},
                               {"bos_token_id", nullptr},
                               {"eos_token_id", 258},
                               {"pad_token_id", 256},
                               {"torch_dtype", "float32"}};
  return model::HfModelConfig::from_json(json, "tiny Qwen2 config");
}

/// Writes a Hugging Face model folder: config.json + model.safetensors (random weights drawn as
/// transformers initializes them) + tokenizer.json + tokenizer_config.json.
inline void write_initial_model(const std::filesystem::path& folder, const TinyModelOptions& options) {
  const auto config = tiny_qwen2_config(options);
  const auto transformer = model::Transformer::random(
      config, model::WeightInit{.initializer_range = options.initializer_range, .seed = options.seed},
      model::TransformerOptions{.num_threads = 1});
  model::save_transformer(transformer, folder);
  io::write_file_atomically(folder / "tokenizer.json", byte_level_tokenizer_json().dump(2) + "\n");
  io::write_file_atomically(folder / "tokenizer_config.json",
                                       byte_level_tokenizer_config(options.max_position_embeddings).dump(2) + "\n");
}

/// What write_arithmetic_task wrote (`model` empty when no model was asked for).
struct ArithmeticTaskFiles {
  std::filesystem::path train, val, sft_train, sft_val, model;
};

/// train.jsonl, val.jsonl (RL rows), sft_train.jsonl, sft_val.jsonl (SFT pairs, from the
/// demonstrator) and, unless `model_options` is nullopt (the run starts from a pretrained model),
/// model/.
inline ArithmeticTaskFiles write_arithmetic_task(const std::filesystem::path& out, const ArithmeticTaskOptions& task,
                                                 const std::optional<TinyModelOptions>& model_options) {
  const ArithmeticSplits splits = generate_arithmetic_problems(task);
  std::filesystem::create_directories(out);
  ArithmeticTaskFiles files{out / "train.jsonl", out / "val.jsonl", out / "sft_train.jsonl", out / "sft_val.jsonl",
                            model_options ? out / "model" : std::filesystem::path()};
  // The demonstrator's slips are drawn from their own stream: the problems do not depend on them.
  std::mt19937_64 slips = data::seeded_engine(task.seed, 1);
  // A uniform double in [0, 1) from the top 53 bits (the same on every standard library).
  auto uniform = [](std::mt19937_64& engine) { return static_cast<double>(engine() >> 11) * 0x1.0p-53; };
  auto write = [&](const std::filesystem::path& rl_path, const std::filesystem::path& sft_path,
                   const std::vector<ArithmeticProblem>& problems, std::string_view split) {
    std::vector<nlohmann::json> rl, sft;
    for (std::size_t i = 0; i < problems.size(); ++i) {
      rl.push_back(rl_row(problems[i], split, static_cast<std::int64_t>(i), task.prompt_style));
      const bool slip = problems[i].answer() >= 10 && uniform(slips) < task.sft_carry_slip;
      sft.push_back(sft_row(problems[i], slip, task.prompt_style));
    }
    data::write_jsonl(rl_path, rl);
    data::write_jsonl(sft_path, sft);
  };
  write(files.train, files.sft_train, splits.train, "train");
  write(files.val, files.sft_val, splits.val, "test");
  if (model_options) write_initial_model(files.model, *model_options);
  return files;
}

}  // namespace verl::trainer::tasks
