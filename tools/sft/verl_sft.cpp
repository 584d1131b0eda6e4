// verl_sft: supervised fine-tuning with verl's SFT trainer keys (verl.trainer.fsdp_sft_trainer),
// on the reference transformer. All logic lives in verl/trainer/sft_trainer.hpp.
//
//   verl_sft [--config FILE.yaml] data.train_files=... model.partial_pretrain=DIR key=value ...
//
// model.partial_pretrain is a Hugging Face folder or a GGUF file; model.lora_rank > 0 trains LoRA
// adapters on the frozen model. The fine-tuned model is written as a Hugging Face folder (with the
// tokenizer files of model.partial_pretrain; merged, with LoRA, and the PEFT adapter beside it in
// lora_adapter/) to <trainer.default_local_dir>/global_step_<N>/huggingface at every checkpoint;
// the last one's path is printed at the end.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "verl/model/checkpoint.hpp"
#include "verl/tokenizer/pretrained.hpp"
#include "verl/trainer/config_yaml.hpp"
#include "verl/trainer/policy_source.hpp"
#include "verl/trainer/sft_trainer.hpp"

namespace {

constexpr std::string_view usage = R"(usage: verl_sft [--config FILE.yaml] key=value ...

verl's SFT trainer keys, e.g.
  data.train_files=train.jsonl data.val_files=val.jsonl data.prompt_key=question data.response_key=answer
  data.max_length=64 data.train_batch_size=32 data.micro_batch_size_per_gpu=8
  model.partial_pretrain=MODEL_DIR optim.lr=1e-3 optim.warmup_steps_ratio=0.1 optim.clip_grad=1.0
  trainer.total_epochs=2 (or trainer.total_training_steps=N) trainer.default_local_dir=OUT
  trainer.logger=['console','file'] trainer.seed=1 trainer.save_freq=-1 trainer.test_freq=-1
)";

template <class Policy>
int fine_tune(Policy& policy, const verl::trainer::SFTConfig& config, const std::filesystem::path& source,
              std::vector<verl::trainer::SFTExample> train, std::vector<verl::trainer::SFTExample> val) {
  namespace fs = std::filesystem;
  using namespace verl;
  fmt::print("verl_sft: {} ({} trainable parameters), {} train / {} val examples\n", source.string(),
             model::parameter_count(policy), train.size(), val.size());
  trainer::SFTTrainer sft(policy, config, std::move(train), std::move(val));
  fs::path last_hf;
  sft.set_save_hook([&](const fs::path& folder) {
    last_hf = folder / "huggingface";
    trainer::save_policy(policy, last_hf, folder / "lora_adapter", source.string());
    trainer::save_tokenizer_files(source, last_hf);
  });
  const std::optional<std::int64_t> resumed_at = sft.maybe_resume();
  if (resumed_at) {
    fmt::print("verl_sft: resumed from step {}\n", *resumed_at);
  } else if (config.trainer.resume_mode == "auto") {
    fmt::print("verl_sft: trainer.resume_mode=auto: no checkpoint to resume from; training from scratch\n");
  }
  trainer::TrackingOptions tracking_options;
  tracking_options.console.total_steps = sft.total_steps();
  tracking_options.resumed_at_step = resumed_at;  // the file logger continues the run's log
  trainer::Tracking tracking(config.trainer.project_name, config.trainer.experiment_name, config.trainer.logger,
                             tracking_options);
  sft.fit(tracking);
  tracking.finish();
  if (!last_hf.empty()) fmt::print("verl_sft: saved {}\n", last_hf.string());
  return 0;
}

int run(int argc, char** argv) {
  namespace fs = std::filesystem;
  using namespace verl;
  const auto args = trainer::parse_config_arguments(argc, argv);
  if (args.help) {
    std::fputs(usage.data(), stdout);
    return 0;
  }
  const auto file_tree =
      args.config_file ? trainer::read_config_yaml(*args.config_file) : trainer::detail::ConfigNode::map("defaults");
  const trainer::SFTConfig config = trainer::load_sft_config(args.overrides, file_tree);

  const fs::path source = config.model.partial_pretrain;
  model::Transformer base = trainer::load_policy(source, "model.partial_pretrain");
  const auto tokenizer = trainer::load_policy_tokenizer(source);
  auto train = trainer::load_sft_examples(config.data.train_files, tokenizer, config.data);
  auto val = trainer::load_sft_examples(config.data.val_files, tokenizer, config.data);
  const trainer::LoraKeys lora_keys{.lora_rank = config.model.lora_rank,
                                    .lora_alpha = config.model.lora_alpha,
                                    .target_modules = config.model.target_modules,
                                    .exclude_modules = {},
                                    .lora_adapter_path = std::nullopt};
  if (const auto lora = trainer::lora_options(lora_keys, "model.")) {
    model::LoraTransformer policy(std::move(base), *lora, "model.");
    return fine_tune(policy, config, source, std::move(train), std::move(val));
  }
  return fine_tune(base, config, source, std::move(train), std::move(val));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "verl_sft: error: %s\n", error.what());
    return 1;
  }
}
