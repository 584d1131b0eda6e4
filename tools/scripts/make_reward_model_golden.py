#!/usr/bin/env python3
"""Tiny Hugging Face reward models (*ForSequenceClassification, one label) and their scores, the
golden data of verl-cpp's reward model (tests/data/models/tiny-*-rm/), made with `transformers`
and nothing downloaded from the hub.

    pip install torch transformers safetensors
    python3 tools/scripts/make_reward_model_golden.py [--out tests/data/models] [--only tiny-llama-rm,...]

For each architecture (Llama with grouped-query attention and an explicit head_dim, Qwen2 with its
q/k/v biases, Qwen3 with per-head q/k norms and attention biases, Mistral with a sliding window)
it builds a small sequence-classification model from a fixed seed (weights drawn wider than
transformers' 0.02 so that scores are far apart, norm weights and biases randomized too, every
weight rounded to bfloat16), saves it with save_pretrained in bfloat16 (a few tens of KB), reloads
it in float32 and records in golden.json, for two batches:

  * "verl_layout": verl's PPO batch, prompts left-padded and responses right-padded with the pad
    id, an attention mask and verl's position ids (cumsum(mask) - 1 clipped at 0); no response
    ends in the pad id;
  * "ends_in_eos": every response ends in an eos token (then right padding, or none when it fills
    its columns). Where the model's pad id is also its eos id (llama, qwen3, mistral here),
    transformers' own pooling and verl's disagree on these rows.

and for each batch:
  * "transformers_scores": what the model's forward returns (transformers pools the logit of the
    rightmost token whose id differs from config.pad_token_id, ignoring the attention mask),
    with "transformers_index", the column it pooled;
  * "verl_index": the column verl's reward-model worker reads, argmax(position_ids *
    attention_mask) per row (the last attended token for rows of two or more tokens);
  * "token_scores": the score head's output at every attended position (null at padding), so
    that a test can read any position's score.
"""

import argparse
import json
from pathlib import Path

import torch
import transformers

REPO = Path(__file__).resolve().parents[2]

VOCAB = 96
PAD_OR_EOS_LIMIT = 90  # ordinary tokens are drawn below this; special ids live above it

COMMON = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=64, tie_word_embeddings=False, num_labels=1)

MODELS = {
    "tiny-llama-rm": dict(
        config=dict(COMMON, model_type="llama", intermediate_size=48, num_key_value_heads=1, head_dim=16,
                    rope_theta=500000.0, rms_norm_eps=1e-5, bos_token_id=93, eos_token_id=94, pad_token_id=94,
                    architectures=["LlamaForSequenceClassification"]),
        seed=1111,
    ),
    "tiny-qwen2-rm": dict(
        config=dict(COMMON, model_type="qwen2", intermediate_size=64, num_key_value_heads=2, rope_theta=1000000.0,
                    rms_norm_eps=1e-6, bos_token_id=93, eos_token_id=94, pad_token_id=95,
                    architectures=["Qwen2ForSequenceClassification"]),
        seed=2222,
    ),
    "tiny-qwen3-rm": dict(
        config=dict(COMMON, model_type="qwen3", intermediate_size=56, num_key_value_heads=2, head_dim=12,
                    attention_bias=True, rope_theta=1000000.0, rms_norm_eps=1e-6, bos_token_id=93,
                    eos_token_id=[94, 92], pad_token_id=94, architectures=["Qwen3ForSequenceClassification"]),
        seed=3333,
    ),
    "tiny-mistral-rm": dict(
        config=dict(COMMON, model_type="mistral", intermediate_size=64, num_key_value_heads=2, rope_theta=10000.0,
                    rms_norm_eps=1e-5, sliding_window=5, bos_token_id=93, eos_token_id=94, pad_token_id=94,
                    architectures=["MistralForSequenceClassification"]),
        seed=4444,
    ),
}

WEIGHT_STD = 0.25
# (prompt length, response length) per row; prompts take PROMPT_WIDTH columns, responses RESPONSE_WIDTH.
PROMPT_WIDTH, RESPONSE_WIDTH = 6, 5
ROWS = [(3, 5), (6, 2), (1, 4), (4, 1), (2, 3)]


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


def verl_batch(pad_id, end_id, seed):
    """Prompts left-padded, responses right-padded with pad_id; with end_id, each response's last
    valid token is end_id."""
    generator = torch.Generator().manual_seed(seed)
    width = PROMPT_WIDTH + RESPONSE_WIDTH
    input_ids = torch.full((len(ROWS), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(ROWS), width), dtype=torch.long)
    for row, (prompt, response) in enumerate(ROWS):
        input_ids[row, PROMPT_WIDTH - prompt:PROMPT_WIDTH] = torch.randint(0, PAD_OR_EOS_LIMIT, (prompt,),
                                                                           generator=generator)
        input_ids[row, PROMPT_WIDTH:PROMPT_WIDTH + response] = torch.randint(0, PAD_OR_EOS_LIMIT, (response,),
                                                                             generator=generator)
        if end_id is not None:
            input_ids[row, PROMPT_WIDTH + response - 1] = end_id
        attention_mask[row, PROMPT_WIDTH - prompt:PROMPT_WIDTH + response] = 1
    position_ids = torch.clamp(torch.cumsum(attention_mask, dim=-1) - 1, min=0)
    return input_ids, attention_mask, position_ids


def score_batch(model, input_ids, attention_mask, position_ids):
    with torch.no_grad():
        pooled = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
        hidden = model.model(input_ids=input_ids, attention_mask=attention_mask,
                             position_ids=position_ids).last_hidden_state
        per_token = model.score(hidden).squeeze(-1)
    pad = model.config.pad_token_id
    columns = torch.arange(input_ids.shape[1])
    transformers_index = ((input_ids != pad).long() * columns).argmax(-1)
    verl_index = torch.argmax(position_ids * attention_mask, dim=-1)
    rows = torch.arange(input_ids.shape[0])
    # The recorded pooled scores are the head's output at transformers' column: the per-token
    # scores below are the ones the forward pass pooled from.
    assert torch.allclose(pooled.squeeze(-1), per_token[rows, transformers_index], atol=1e-6)
    token_scores = [[float(per_token[r, c]) if attention_mask[r, c] else None for c in range(input_ids.shape[1])]
                    for r in range(input_ids.shape[0])]
    return {
        "input_ids": input_ids.tolist(),
        "attention_mask": attention_mask.tolist(),
        "position_ids": position_ids.tolist(),
        "transformers_scores": pooled.squeeze(-1).tolist(),
        "transformers_index": transformers_index.tolist(),
        "verl_index": verl_index.tolist(),
        "verl_scores": per_token[rows, verl_index].tolist(),
        "token_scores": token_scores,
    }


def make_model(name, spec, out_root):
    folder = out_root / name
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(spec["seed"])
    config = make_config(spec["config"])
    model = transformers.AutoModelForSequenceClassification.from_config(config, attn_implementation="eager")
    assert model.score.bias is None and tuple(model.score.weight.shape) == (1, config.hidden_size)
    randomize(model, spec["seed"])
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    (folder / "generation_config.json").unlink(missing_ok=True)

    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32,
                                                                           attn_implementation="eager")
    model.eval()
    pad_id = model.config.pad_token_id
    eos = model.config.eos_token_id
    eos_id = eos[0] if isinstance(eos, list) else eos

    verl_layout = score_batch(model, *verl_batch(pad_id, None, spec["seed"] + 1))
    ends_in_eos = score_batch(model, *verl_batch(pad_id, eos_id, spec["seed"] + 2))
    # On verl's layout both rules pick the last attended token.
    assert verl_layout["transformers_index"] == verl_layout["verl_index"], name
    # Ending in eos: they agree exactly when the pad id is not the eos id.
    disagree = [t != v for t, v in zip(ends_in_eos["transformers_index"], ends_in_eos["verl_index"])]
    assert all(disagree) if pad_id == eos_id else not any(disagree), (name, disagree)

    golden = {
        "model": name,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "pad_token_id": pad_id,
        "eos_token_id": eos_id,
        "pad_is_eos": pad_id == eos_id,
        "batches": {"verl_layout": verl_layout, "ends_in_eos": ends_in_eos},
    }
    (folder / "golden.json").write_text(json.dumps(golden, indent=1) + "\n")
    sizes = {p.name: p.stat().st_size for p in sorted(folder.iterdir())}
    print(f"{name}: scores {verl_layout['transformers_scores']}, files {sizes}")


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
