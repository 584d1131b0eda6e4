#!/usr/bin/env python3
"""Tiny Hugging Face models and their outputs, the golden data of verl-cpp's reference transformer
(tests/data/models/<name>/), made with `transformers` and nothing downloaded from the hub.

    pip install torch transformers safetensors
    python3 tools/scripts/make_model_golden.py [--out tests/data/models] [--only tiny-qwen3,...]

For each model (a Qwen2-architecture one with q/k/v biases and tied embeddings, a Llama one with
grouped-query attention, an explicit head_dim, llama3 rope scaling and an untied LM head, a Qwen3
one with per-head q/k norms, attention biases on q/k/v/o and an explicit head_dim, a Qwen2 one
whose later layers attend through a sliding window of 4 keys, a Mistral one with a window of 5, a
Llama one with a SentencePiece-style tokenizer and Mistral-Instruct-v0.1's [INST] chat template) it
  * builds the model from a config with a fixed seed (weights drawn wider than transformers' 0.02
    so that logits are far apart and greedy decoding is robust to float rounding; norm weights and
    biases are randomized too so that they are exercised), rounds the weights to bfloat16 and saves
    config.json + model.safetensors (bf16, to keep the data small) with save_pretrained;
  * links tokenizer.json to the matching tokenizer of tests/data/tokenizer and writes a
    tokenizer_config.json with its special tokens and chat template;
  * reloads the checkpoint in float32 and records, in golden.json / golden_logits.safetensors:
      - the logits at every valid position of a left-padded batch (position ids as verl computes
        them: cumsum(attention_mask) - 1 clipped at 0),
      - the greedy continuation of that batch (model.generate, checked against a plain loop),
      - a chat prompt tokenized through the chat template and its greedy continuation,
      - per-parameter summaries (L2 norm, and dot product with the weights) of the gradient of
        sum_t w_t * logp_t(next token) + u_t * entropy_t at temperature 0.7.
"""

import argparse
import json
import os
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parents[2]
TOKENIZERS = REPO / "tests" / "data" / "tokenizer"

MODELS = {
    "tiny-qwen2": dict(
        tokenizer="qwen2",
        config=dict(
            model_type="qwen2",
            vocab_size=1408,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            bos_token_id=1400,
            eos_token_id=[1402, 1400],
            architectures=["Qwen2ForCausalLM"],
        ),
        special=dict(bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>"),
        chat_template="qwen2",
        seed=1234,
    ),
    "tiny-llama": dict(
        tokenizer="llama3",
        config=dict(
            model_type="llama",
            vocab_size=1408,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=16,
            max_position_embeddings=64,
            rope_theta=500000.0,
            rope_scaling=dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=32,
            ),
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            bos_token_id=1400,
            eos_token_id=[1401, 1405],
            architectures=["LlamaForCausalLM"],
        ),
        special=dict(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", pad_token="<|end_of_text|>"),
        chat_template="llama3",
        seed=4321,
    ),
    "tiny-qwen3": dict(
        tokenizer="qwen2",
        config=dict(
            model_type="qwen3",
            vocab_size=1408,
            hidden_size=32,
            intermediate_size=56,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=12,
            max_position_embeddings=64,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
            attention_bias=True,
            tie_word_embeddings=True,
            bos_token_id=1400,
            eos_token_id=[1402, 1400],
            architectures=["Qwen3ForCausalLM"],
        ),
        special=dict(bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>"),
        chat_template="qwen2",
        seed=2468,
    ),
    "tiny-qwen2-sliding": dict(
        tokenizer="qwen2",
        config=dict(
            model_type="qwen2",
            vocab_size=1408,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            rope_theta=10000.0,
            rms_norm_eps=1e-6,
            use_sliding_window=True,
            sliding_window=4,
            max_window_layers=1,
            tie_word_embeddings=False,
            bos_token_id=1400,
            eos_token_id=[1402, 1400],
            architectures=["Qwen2ForCausalLM"],
        ),
        special=dict(bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>"),
        chat_template="qwen2",
        seed=1357,
    ),
    "tiny-mistral": dict(
        tokenizer="llama3",
        config=dict(
            model_type="mistral",
            vocab_size=1408,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            rope_theta=10000.0,
            rms_norm_eps=1e-5,
            sliding_window=5,
            tie_word_embeddings=False,
            bos_token_id=1400,
            eos_token_id=1401,
            architectures=["MistralForCausalLM"],
        ),
        special=dict(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", pad_token="<|end_of_text|>"),
        chat_template="llama3",
        seed=9753,
    ),
    # SentencePiece-style tokenizer (byte fallback, Metaspace) and a Jinja-only chat template
    # (Mistral-7B-Instruct-v0.1's [INST] format, from tests/data/tokenizer/jinja_templates.json).
    "tiny-llama2": dict(
        tokenizer="mistral",
        config=dict(
            model_type="llama",
            vocab_size=1280,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            rope_theta=10000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
            architectures=["LlamaForCausalLM"],
        ),
        special=dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<unk>"),
        chat_template="mistral_7b_instruct_v0_1",
        seed=2468,
    ),
}

PROMPT_LENGTHS = [3, 5, 8]  # left-padded to the longest
NEW_TOKENS = 8
WEIGHT_STD = 0.25
TEMPERATURE = 0.7
CHAT = [{"role": "user", "content": "Hello there! What is 2 + 3?"}]


def make_config(spec):
    fields = dict(spec)
    model_type = fields.pop("model_type")
    config_class = {"qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config,
                    "llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig}[model_type]
    config = config_class(**fields)
    config._attn_implementation = "eager"
    return config


def randomize(model, seed):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                values = 1.0 + 0.1 * torch.randn(param.shape, generator=generator)
            elif name.endswith(".bias"):
                values = 0.1 * torch.randn(param.shape, generator=generator)
            else:
                values = WEIGHT_STD * torch.randn(param.shape, generator=generator)
            # Representable in bfloat16, so that the bf16 checkpoint holds exactly these weights.
            param.copy_(values.to(torch.bfloat16).to(torch.float32))


def left_padded_batch(lengths, pad_id, vocab_limit, seed):
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    input_ids = torch.full((len(lengths), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for row, length in enumerate(lengths):
        input_ids[row, width - length:] = torch.randint(0, vocab_limit, (length,), generator=generator)
        attention_mask[row, width - length:] = 1
    position_ids = torch.clamp(torch.cumsum(attention_mask, dim=-1) - 1, min=0)
    return input_ids, attention_mask, position_ids


def greedy_loop(model, input_ids, attention_mask, steps):
    """Greedy decoding without a cache, recomputing every position: the reference generate() must
    agree with. Returns the new tokens and the smallest top-1/top-2 logit gap seen."""
    ids, mask = input_ids.clone(), attention_mask.clone()
    new_tokens, min_gap = [], float("inf")
    for _ in range(steps):
        position_ids = torch.clamp(torch.cumsum(mask, dim=-1) - 1, min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits[:, -1, :]
        top2 = torch.topk(logits, 2, dim=-1).values
        min_gap = min(min_gap, float((top2[:, 0] - top2[:, 1]).min()))
        token = logits.argmax(dim=-1, keepdim=True)
        new_tokens.append(token)
        ids = torch.cat([ids, token], dim=-1)
        mask = torch.cat([mask, torch.ones_like(token)], dim=-1)
    return torch.cat(new_tokens, dim=-1), min_gap


def gradient_summaries(model, input_ids, attention_mask, position_ids, seed):
    generator = torch.Generator().manual_seed(seed)
    model.zero_grad()
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    scaled = logits / TEMPERATURE
    log_probs_all = torch.log_softmax(scaled, dim=-1)
    targets = torch.roll(input_ids, shifts=-1, dims=-1)
    log_probs = torch.gather(log_probs_all, -1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_probs_all.exp() * log_probs_all).sum(-1)
    # Weights only on valid positions that have a next token in the same row.
    valid_next = attention_mask.clone()
    valid_next[:, -1] = 0
    logprob_weights = torch.randn(input_ids.shape, generator=generator) * valid_next
    entropy_weights = 0.1 * torch.randn(input_ids.shape, generator=generator) * attention_mask
    loss = (logprob_weights * log_probs).sum() + (entropy_weights * entropy).sum()
    loss.backward()
    summaries = {}
    for name, param in model.named_parameters():
        summaries[name] = {
            "norm": float(param.grad.double().norm()),
            "dot_weight": float((param.grad.double() * param.detach().double()).sum()),
        }
    return {
        "temperature": TEMPERATURE,
        "logprob_weights": logprob_weights.tolist(),
        "entropy_weights": entropy_weights.tolist(),
        "loss": float(loss),
        "parameters": summaries,
    }


def write_tokenizer(folder, spec):
    # A relative symlink to the tokenizer tests' copy keeps the committed data small.
    target = folder / "tokenizer.json"
    target.unlink(missing_ok=True)
    target.symlink_to(os.path.relpath(TOKENIZERS / f"{spec['tokenizer']}.tokenizer.json", folder))
    templates = json.loads((TOKENIZERS / "chat_template_sources.json").read_text())
    # Templates only the Jinja engine renders come from its golden corpus.
    jinja = json.loads((TOKENIZERS / "jinja_templates.json").read_text())["official"]
    templates.update({name: entry["template"] for name, entry in jinja.items() if name not in templates})
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": templates[spec["chat_template"]],
              "model_max_length": spec["config"]["max_position_embeddings"], "clean_up_tokenization_spaces": False}
    config.update({key: value for key, value in spec["special"].items() if value is not None})
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def make_model(name, spec, out_root):
    folder = out_root / name
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(spec["seed"])
    config = make_config(spec["config"])
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    randomize(model, spec["seed"])
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    for extra in ("generation_config.json",):
        (folder / extra).unlink(missing_ok=True)
    write_tokenizer(folder, spec)

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    pad_id = tokenizer.pad_token_id
    vocab_limit = len(tokenizer)

    input_ids, attention_mask, position_ids = left_padded_batch(PROMPT_LENGTHS, pad_id, vocab_limit, spec["seed"] + 1)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
        valid = attention_mask.bool()
        save_file({"logits": logits[valid].contiguous()}, folder / "golden_logits.safetensors")

        greedy, min_gap = greedy_loop(model, input_ids, attention_mask, NEW_TOKENS)
        generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
                                   max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=pad_id,
                                   eos_token_id=None)[:, input_ids.shape[1]:]
        assert torch.equal(generated, greedy), f"{name}: generate() and the plain greedy loop disagree"
        assert min_gap > 1e-3, f"{name}: top-1/top-2 logit gap {min_gap} too small for a robust greedy test"

        chat_ids = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True)
        if isinstance(chat_ids, dict) or hasattr(chat_ids, "input_ids"):
            chat_ids = chat_ids["input_ids"]
        chat_input = torch.tensor([chat_ids], dtype=torch.long)
        chat_greedy, chat_gap = greedy_loop(model, chat_input, torch.ones_like(chat_input), NEW_TOKENS)
        assert chat_gap > 1e-3, f"{name}: chat top-1/top-2 gap {chat_gap} too small"

    gradients = gradient_summaries(model, input_ids, attention_mask, position_ids, spec["seed"] + 2)
    golden = {
        "model": name,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "input_ids": input_ids.tolist(),
        "attention_mask": attention_mask.tolist(),
        "position_ids": position_ids.tolist(),
        "logits_file": "golden_logits.safetensors",
        "logits_rows": "valid positions of the batch in row-major order",
        "greedy_new_tokens": greedy.tolist(),
        "greedy_min_logit_gap": min_gap,
        "chat_messages": CHAT,
        "chat_prompt_ids": list(chat_ids),
        "chat_greedy_new_tokens": chat_greedy[0].tolist(),
        "gradients": gradients,
    }
    (folder / "golden.json").write_text(json.dumps(golden, indent=1) + "\n")
    sizes = {p.name: p.stat().st_size for p in sorted(folder.iterdir())}
    print(f"{name}: min greedy gap {min_gap:.4f}, files {sizes}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "models")
    parser.add_argument("--only", default="", help="comma-separated model names (default: all)")
    args = parser.parse_args()
    only = {name for name in args.only.split(",") if name}
    unknown = only - MODELS.keys()
    if unknown:
        parser.error(f"--only: unknown models {sorted(unknown)} (known: {sorted(MODELS)})")
    for name, spec in MODELS.items():
        if not only or name in only:
            make_model(name, spec, args.out)


if __name__ == "__main__":
    main()
