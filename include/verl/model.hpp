// Module header: the model layer — the CausalLM, value-model and reward-model concepts, Hugging
// Face configs, safetensors files and folders, checkpoints, GGUF files (and, with PCRE2 for their
// tokenizer, GGUF models), and the reference Llama/Mistral/Qwen2/Qwen3 transformer (dense, with its
// critic and reward-model variants and KV cache). Needs nlohmann-json.
#pragma once

#include "verl/model/causal_lm.hpp"
#include "verl/model/value_model.hpp"
#include "verl/model/reward_model.hpp"
#include "verl/model/decode_precision.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/safetensors.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/model/gguf.hpp"
#if __has_include(<pcre2.h>)
#include "verl/model/gguf_model.hpp"
#endif
#include "verl/model/transformer/attention.hpp"
#include "verl/model/transformer/critic.hpp"
#include "verl/model/transformer/decoder.hpp"
#include "verl/model/transformer/kv_cache.hpp"
#include "verl/model/transformer/reward_model.hpp"
#include "verl/model/transformer/rms_norm.hpp"
#include "verl/model/transformer/rope.hpp"
#include "verl/model/transformer/tensor_parallel_regions.hpp"
#include "verl/model/transformer/tensor_parallel_transformer.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/model/transformer/weights.hpp"
