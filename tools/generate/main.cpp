// verl_generate: sample continuations from a Hugging Face model folder (config.json,
// model.safetensors, tokenizer.json [+ tokenizer_config.json]) or a GGUF file (llama.cpp; its
// tokenizer and chat template come from its metadata) with the reference transformer and the
// KV-cache rollout engine. All logic lives in the library; this file parses flags and prints.
//
//   verl_generate --model DIR|FILE.gguf (--prompt TEXT | --prompt-ids 1,2,3) [--max-new-tokens N]
//                 [--temperature T] [--top-k K] [--top-p P] [--seed S] [-n N] [--threads N]
//                 [--dtype float32|bfloat16] [--no-chat-template] [--chat-template-kwargs JSON]
//                 [--print-ids] [--batch B] [--ignore-eos] [--time ROUNDS]
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "verl/model/checkpoint.hpp"
#include "verl/model/gguf_model.hpp"
#include "verl/tokenizer/pretrained.hpp"
#include "verl/rollout/rollout.hpp"

namespace {

constexpr std::string_view usage = R"(usage: verl_generate --model DIR|FILE.gguf (--prompt TEXT | --prompt-ids 1,2,3) [options]

Generates from a Hugging Face model folder (config.json, model.safetensors or shards, tokenizer.json)
or a GGUF file (llama, qwen2, qwen3; quantized weights are dequantized to float32).

  --model DIR|FILE     the model folder, or a .gguf file
  --prompt TEXT        a user message, rendered with the folder's chat template (if any) and tokenized
  --prompt-ids IDS     comma-separated prompt token ids (no tokenizer needed)
  --no-chat-template   tokenize --prompt as plain text
  --chat-template-kwargs JSON
                       extra chat template variables, e.g. '{"enable_thinking": false}' (Qwen3)
  --max-new-tokens N   response length limit (default 32)
  --temperature T      0 = greedy (default 1.0)
  --top-k K            sample from the K most likely tokens (default -1: all)
  --top-p P            nucleus sampling mass in (0, 1] (default 1.0)
  --seed S             random seed (default 0)
  -n N                 samples for the prompt (default 1)
  --threads N          model threads (default: VERL_NUM_THREADS, else the CPUs this process may use)
  --dtype D            weights the rollout decodes with: float32 (default) or bfloat16 (verl's
                       rollout.dtype: bfloat16 linear products, half the bytes per decode step)
  --print-ids          print the generated token ids, one sample per line
  --batch B            generate for B copies of the prompt in one batch (default 1)
  --ignore-eos         never stop at an end-of-sequence token (every sample runs to --max-new-tokens)
  --time ROUNDS        also time the generation: ROUNDS alternating calls with 1 new token (prefill)
                       and with --max-new-tokens; prints one JSON line with the medians, the decode
                       time as the median of the paired differences, and decode tokens/s
                       (batch x (max-new-tokens - 1) decode steps' tokens), as llama-batched-bench's
                       S_TG
)";

struct Arguments {
  std::filesystem::path model;
  std::optional<std::string> prompt;
  std::optional<std::vector<verl::model::TokenId>> prompt_ids;
  bool chat_template = true;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool print_ids = false;
  bool ignore_eos = false;
  std::int64_t batch = 1;
  std::int64_t time_rounds = 0;
  unsigned threads = 0;
  verl::model::DecodePrecision precision = verl::model::DecodePrecision::float32;
  verl::rollout::SamplingParams sampling{.max_response_length = 32};
};

[[noreturn]] void fail_usage(const std::string& message) {
  throw verl::InvalidArgument(message);
}

template <class T>
T parse_number(std::string_view flag, std::string_view text) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    fail_usage(fmt::format("{}: expected a number, got '{}'", flag, text));
  }
  return value;
}

std::vector<verl::model::TokenId> parse_ids(std::string_view text) {
  std::vector<verl::model::TokenId> ids;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    verl::model::TokenId id = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || error != std::errc() || end != item.data() + item.size()) {
      fail_usage(fmt::format("--prompt-ids: expected comma-separated token ids, got '{}'", item));
    }
    ids.push_back(id);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (ids.empty()) fail_usage("--prompt-ids: expected at least one token id");
  return ids;
}

Arguments parse(int argc, char** argv) {
  Arguments args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) fail_usage(fmt::format("{}: expected a value", flag));
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      std::fputs(usage.data(), stdout);
      std::exit(0);
    } else if (flag == "--model") {
      args.model = std::string(value());
    } else if (flag == "--prompt") {
      args.prompt = std::string(value());
    } else if (flag == "--prompt-ids") {
      args.prompt_ids = parse_ids(value());
    } else if (flag == "--no-chat-template") {
      args.chat_template = false;
    } else if (flag == "--chat-template-kwargs") {
      try {
        args.chat_template_kwargs = nlohmann::ordered_json::parse(value());
      } catch (const nlohmann::json::exception& error) {
        fail_usage(fmt::format("--chat-template-kwargs: expected a JSON object, got invalid JSON ({})", error.what()));
      }
      if (!args.chat_template_kwargs.is_object()) {
        fail_usage(fmt::format("--chat-template-kwargs: expected a JSON object, got {}", args.chat_template_kwargs.dump()));
      }
    } else if (flag == "--max-new-tokens") {
      args.sampling.max_response_length = parse_number<std::int64_t>(flag, value());
    } else if (flag == "--temperature") {
      args.sampling.temperature = parse_number<float>(flag, value());
    } else if (flag == "--top-k") {
      args.sampling.top_k = parse_number<std::int64_t>(flag, value());
    } else if (flag == "--top-p") {
      args.sampling.top_p = parse_number<float>(flag, value());
    } else if (flag == "--seed") {
      args.sampling.seed = parse_number<std::uint64_t>(flag, value());
    } else if (flag == "-n") {
      args.sampling.n = parse_number<std::int64_t>(flag, value());
    } else if (flag == "--threads") {
      args.threads = parse_number<unsigned>(flag, value());
    } else if (flag == "--dtype") {
      try {
        args.precision = verl::model::parse_decode_precision(value(), "--dtype");
      } catch (const verl::InvalidArgument& error) {
        fail_usage(error.what());
      }
    } else if (flag == "--print-ids") {
      args.print_ids = true;
    } else if (flag == "--batch") {
      args.batch = parse_number<std::int64_t>(flag, value());
      if (args.batch < 1) fail_usage(fmt::format("--batch: expected at least 1 prompt copy, got {}", args.batch));
    } else if (flag == "--ignore-eos") {
      args.ignore_eos = true;
    } else if (flag == "--time") {
      args.time_rounds = parse_number<std::int64_t>(flag, value());
      if (args.time_rounds < 1) fail_usage(fmt::format("--time: expected at least 1 round, got {}", args.time_rounds));
    } else {
      fail_usage(fmt::format("unknown flag '{}' (see --help)", flag));
    }
  }
  if (args.model.empty()) fail_usage("--model: a model folder or GGUF file is required (see --help)");
  if (args.prompt.has_value() == args.prompt_ids.has_value()) {
    fail_usage("expected exactly one of --prompt TEXT and --prompt-ids IDS");
  }
  return args;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t half = values.size() / 2;
  return values.size() % 2 == 1 ? values[half] : 0.5 * (values[half - 1] + values[half]);
}

/// Decode time by difference, as llama-batched-bench separates prompt processing (PP) from text
/// generation (TG): a call with one new token is the prefill and the first sample; a call with
/// max-new-tokens adds (max-new-tokens - 1) decode steps of `batch` tokens each. The rounds
/// alternate the two calls so that a change in the machine's load hits both.
template <class Engine>
void print_timing(const Arguments& args, Engine& engine, const verl::rollout::PromptBatch& batch,
                  const verl::rollout::SamplingParams& sampling, verl::Index prompt_tokens, unsigned threads) {
  using Clock = std::chrono::steady_clock;
  const std::int64_t new_tokens = sampling.max_response_length;
  if (new_tokens < 2) fail_usage(fmt::format("--time: expected --max-new-tokens of at least 2 (one prefill token "
                                             "and one decode step), got {}", new_tokens));
  verl::rollout::SamplingParams prefill_only = sampling;
  prefill_only.max_response_length = 1;
  const auto seconds_of = [&](const verl::rollout::SamplingParams& params) {
    const auto start = Clock::now();
    const verl::rollout::RolloutOutput out = engine.generate(batch, params);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    for (const verl::Index length : out.response_lengths) {
      if (length != params.max_response_length) {
        throw verl::InvalidArgument(fmt::format("--time: a sample stopped after {} of {} tokens; pass --ignore-eos so "
                                                "that every decode step runs the whole batch",
                                                length, params.max_response_length));
      }
    }
    return seconds;
  };
  std::vector<double> prefill, full, decode;
  for (std::int64_t round = 0; round < args.time_rounds; ++round) {
    prefill.push_back(seconds_of(prefill_only));
    full.push_back(seconds_of(sampling));
    decode.push_back(full.back() - prefill.back());
  }
  const verl::Index sequences = batch.input_ids.rows() * sampling.n;
  const auto rows = static_cast<double>(sequences);
  const double decode_s = median(decode), prefill_s = median(prefill);
  nlohmann::ordered_json line = {{"batch", sequences},
                                 {"prompt_tokens", prompt_tokens},
                                 {"new_tokens", new_tokens},
                                 {"threads", threads},
                                 {"dtype", args.precision == verl::model::DecodePrecision::bfloat16 ? "bfloat16" : "float32"},
                                 {"rounds", args.time_rounds},
                                 {"prefill_s", prefill_s},
                                 {"generate_s", median(full)},
                                 {"decode_s", decode_s},
                                 {"prefill_tokens_per_s", rows * static_cast<double>(prompt_tokens) / prefill_s},
                                 {"decode_tokens_per_s", rows * static_cast<double>(new_tokens - 1) / decode_s}};
  fmt::print(stderr, "timing: {}\n", line.dump());
}

int run(const Arguments& args) {
  using namespace verl;
  const model::TransformerOptions options{.num_threads = args.threads, .decode_precision = args.precision};
  std::optional<model::GgufFile> gguf;
  if (model::is_gguf_file(args.model)) gguf.emplace(args.model);
  model::Transformer transformer = gguf ? model::load_gguf_transformer(*gguf, options)
                                        : model::load_transformer(args.model, options);
  std::optional<tokenizer::PretrainedTokenizer> tokenizer;
  if (gguf) {
    tokenizer = model::load_gguf_tokenizer(*gguf);
  } else if (std::filesystem::exists(args.model / "tokenizer.json")) {
    tokenizer = tokenizer::load_pretrained_tokenizer(args.model);
  } else if (args.prompt) {
    throw InvalidArgument(fmt::format("--prompt: '{}' has no tokenizer.json; pass --prompt-ids instead",
                                      args.model.string()));
  }

  std::vector<model::TokenId> prompt;
  if (args.prompt_ids) {
    prompt = *args.prompt_ids;
  } else if (args.chat_template && !args.chat_template_kwargs.empty()) {
    const tokenizer::ChatMessage message{"user", *args.prompt};
    const std::string text = tokenizer->chat_template_with(args.chat_template_kwargs).render(std::span(&message, 1), true);
    prompt = tokenizer->tokenizer.encode(text, false);
  } else if (args.chat_template && tokenizer->chat_template) {
    const tokenizer::ChatMessage message{"user", *args.prompt};
    prompt = tokenizer->encode_chat(std::span(&message, 1));
  } else {
    prompt = tokenizer->tokenizer.encode(*args.prompt, true);
  }

  rollout::SamplingParams sampling = args.sampling;
  if (!args.ignore_eos) sampling.eos_token_ids = transformer.config().eos_token_ids;
  if (tokenizer) {
    const auto special = tokenizer->tokenizer.special_ids();
    if (special.eos && !args.ignore_eos) sampling.eos_token_ids.push_back(*special.eos);
    sampling.pad_token_id = special.pad.value_or(transformer.config().pad_token_id.value_or(0));
  }
  rollout::KvCacheRollout engine(transformer);
  const std::vector<std::vector<model::TokenId>> prompts(static_cast<std::size_t>(args.batch), prompt);
  const rollout::PromptBatch batch = rollout::PromptBatch::left_padded(prompts, 0);
  const rollout::RolloutOutput out = engine.generate(batch, sampling);
  if (args.time_rounds > 0) print_timing(args, engine, batch, sampling, static_cast<Index>(prompt.size()),
                                           static_cast<unsigned>(transformer.num_threads()));

  for (Index row = 0; row < out.responses.rows(); ++row) {
    const Index length = out.response_lengths[static_cast<std::size_t>(row)];
    std::vector<model::TokenId> ids(out.responses.row(row).data(), out.responses.row(row).data() + length);
    if (args.print_ids) {
      fmt::print("{}\n", fmt::join(ids, ","));
      continue;
    }
    std::string text;
    if (tokenizer) {
      // Model vocabularies are often padded past the tokenizer's; those ids have no text.
      std::erase_if(ids, [&](model::TokenId id) { return id >= static_cast<model::TokenId>(tokenizer->tokenizer.vocab_size()); });
      text = tokenizer->tokenizer.decode(ids, true);
    } else {
      text = fmt::format("{}", fmt::join(ids, ","));
    }
    const bool stopped = out.finish_reasons[static_cast<std::size_t>(row)] == rollout::FinishReason::stop;
    fmt::print("--- sample {} ({} tokens, {}) ---\n{}\n", row, length, stopped ? "stop" : "length", text);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "verl_generate: error: %s\n", error.what());
    return 1;
  }
}
