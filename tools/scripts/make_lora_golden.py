#!/usr/bin/env python3
"""PEFT golden data for verl-cpp's LoRA: a LoRA adapter made by the `peft` package on the tiny
Llama folder of tests/data/models, and the logits of the adapted model, so that the C++ tests
(tests/unit/test_lora_checkpoint.cpp) compare against PEFT without needing torch.

Writes tests/data/lora/tiny-llama-adapter/ (adapter_config.json, adapter_model.safetensors) and
tests/data/lora/tiny-llama-logits.json ({"input_ids": [[...]], "logits": [[[...]]]} of
PeftModel(base, adapter)(input_ids), and of the base with the adapter disabled).

With --check-adapter DIR it instead loads an adapter folder written by verl-cpp onto the base
model and prints the largest difference between PEFT's logits and the merged model's logits
from DIR/../merged (both folders made by verl-cpp): the round trip in the other direction.

Needs torch, transformers and peft (a throw-away venv: python3 -m venv /tmp/loraenv &&
/tmp/loraenv/bin/pip install torch transformers peft safetensors).
"""
import argparse
import json
import pathlib

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASE = ROOT / "tests/data/models/tiny-llama"
OUT = ROOT / "tests/data/lora"
INPUT_IDS = [[5, 17, 230, 1400, 9, 88, 3, 41], [1401, 2, 2, 640, 77, 12, 300, 7]]


def base_model():
    return AutoModelForCausalLM.from_pretrained(BASE, torch_dtype=torch.float32).eval()


def make_golden():
    torch.manual_seed(2027)
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                        exclude_modules=["model.layers.1.mlp.down_proj"], lora_dropout=0.0,
                        task_type="CAUSAL_LM")
    model = get_peft_model(base_model(), config)
    # PEFT starts B at zero; random B (and A) make the adapter change the outputs.
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.copy_(0.1 * torch.randn_like(parameter))
    model.eval()
    adapter_dir = OUT / "tiny-llama-adapter"
    model.save_pretrained(adapter_dir)
    ids = torch.tensor(INPUT_IDS)
    with torch.no_grad():
        adapted = model(ids).logits
        with model.disable_adapter():
            disabled = model(ids).logits
        merged = model.merge_and_unload()(ids).logits
    print("merged vs adapted:", (merged - adapted).abs().max().item())
    (OUT / "tiny-llama-logits.json").write_text(json.dumps({
        "input_ids": INPUT_IDS,
        "logits": [[[round(v, 7) for v in row] for row in seq] for seq in adapted.tolist()],
        "disabled_logits": [[[round(v, 7) for v in row] for row in seq] for seq in disabled.tolist()],
    }) + "\n")


def check_adapter(adapter_dir):
    adapter_dir = pathlib.Path(adapter_dir)
    model = PeftModel.from_pretrained(base_model(), adapter_dir).eval()
    merged = AutoModelForCausalLM.from_pretrained(adapter_dir.parent / "merged", torch_dtype=torch.float32).eval()
    ids = torch.tensor(INPUT_IDS)
    with torch.no_grad():
        difference = (model(ids).logits - merged(ids).logits).abs().max().item()
    print(f"max |PEFT(base + adapter) - merged| = {difference:.3g}")
    return difference


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check-adapter", help="a verl-cpp adapter folder beside a merged/ folder")
    args = parser.parse_args()
    if args.check_adapter:
        raise SystemExit(0 if check_adapter(args.check_adapter) < 1e-4 else 1)
    make_golden()
