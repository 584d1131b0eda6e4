#!/usr/bin/env python3
"""transformers' logits and greedy ids for the tiny one-type llamas of tests/data/gguf/
(tiny-llama-<type>.gguf, written by make_gguf_fixtures.py), for test_gguf_model's
EveryQuantTypeMatchesTransformers: each file loaded by transformers itself,
AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32), which
dequantizes it with gguf.quants.

    python3 -m venv /tmp/qenv && /tmp/qenv/bin/pip install numpy gguf torch transformers
    /tmp/qenv/bin/python tools/scripts/make_gguf_fixtures.py
    /tmp/qenv/bin/python tools/scripts/make_gguf_quant_golden.py

quant_models.json
                the versions used, the prompt (PROMPT_LENGTH random ids, the same for every file)
                and per file {"file", "type", "greedy_new_tokens" (NEW_TOKENS greedy ids of
                model.generate with do_sample=False and no end-of-sequence token: the files have
                no tokenizer), "logits_shape" ([prompt length, vocab]), "logits_offset" (in
                floats), "min_top2_gap" (the smallest gap between the two largest logits over the
                prompt positions and greedy steps: how far the ids are from a tie)}.
quant_models_logits.bin
                the logits of the prompt (every position) for each file, little-endian float32,
                one file after another at its logits_offset.
"""
from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

from make_gguf_fixtures import OUT, QUANT_MODEL_SIZES, QUANT_MODEL_TYPES, quant_model_file

PROMPT_LENGTH = 12
NEW_TOKENS = 8


def main() -> None:
    torch.manual_seed(0)
    prompt = np.random.default_rng(20261128).integers(0, QUANT_MODEL_SIZES["vocab"], size=PROMPT_LENGTH).tolist()
    models = []
    logits_out: list[np.ndarray] = []
    offset = 0
    for qtype in QUANT_MODEL_TYPES:
        name = quant_model_file(qtype)
        model = AutoModelForCausalLM.from_pretrained(str(OUT), gguf_file=name, dtype=torch.float32).eval()
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
        ids = torch.tensor([prompt])
        with torch.no_grad():
            logits = model(ids).logits[0].float().numpy()
            out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0,
                                 attention_mask=torch.ones_like(ids))
            new_tokens = out[0, PROMPT_LENGTH:].tolist()
            assert len(new_tokens) == NEW_TOKENS, (name, new_tokens)
            # The whole sequence once more, without the cache: the gaps of every greedy step.
            full = model(out).logits[0].float().numpy()
        assert new_tokens == full[PROMPT_LENGTH - 1:-1].argmax(-1).tolist(), name
        top2 = np.sort(full[:-1], axis=-1)[:, -2:]
        gap = float((top2[:, 1] - top2[:, 0]).min())
        models.append({"file": name, "type": qtype.name, "greedy_new_tokens": new_tokens,
                       "logits_shape": list(logits.shape), "logits_offset": offset, "min_top2_gap": gap})
        logits_out.append(logits.astype("<f4").reshape(-1))
        offset += logits.size
        print(f"{name}: greedy {new_tokens}, max |logit| {np.abs(logits).max():.3f}, min top-2 gap {gap:.2e}")
    golden = {"transformers": transformers.__version__, "torch": torch.__version__,
              "gguf": importlib.metadata.version("gguf"),
              "prompt_ids": prompt, "models": models}
    (OUT / "quant_models.json").write_text(json.dumps(golden, indent=1) + "\n")
    np.concatenate(logits_out).tofile(OUT / "quant_models_logits.bin")


if __name__ == "__main__":
    main()
