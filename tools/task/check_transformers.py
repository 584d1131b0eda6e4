#!/usr/bin/env python3
"""Checks that the model folder verl_make_task writes loads in Hugging Face `tokenizers` and
`transformers` as it does in verl-cpp: byte-level ids, the ChatML prompt, eos/pad ids, the
Qwen2 model. Exit status 77 (ctest's skip) when the packages are absent.

    check_transformers.py VERL_MAKE_TASK OUT_DIR
"""
import json
import subprocess
import sys

try:
    import tokenizers
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
except ImportError as error:  # pragma: no cover - depends on the machine
    print(f"skipped: {error}")
    sys.exit(77)

make_task, out = sys.argv[1], sys.argv[2]
subprocess.run([make_task, "--out", out, "--train", "8", "--val", "4", "--digits", "1", "--operands", "3"], check=True)
folder = f"{out}/model"

raw = tokenizers.Tokenizer.from_file(f"{folder}/tokenizer.json")
assert raw.encode("12+3=").ids == [49, 50, 43, 51, 61], raw.encode("12+3=").ids
assert raw.get_vocab_size() == 259, raw.get_vocab_size()

tok = AutoTokenizer.from_pretrained(folder)
row = json.loads(open(f"{out}/val.jsonl").readline())
text = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
question = row["prompt"][0]["content"]
assert text == f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n", repr(text)
ids = tok(text)["input_ids"]
assert ids[0] == 257 and ids[-1] == 10 and ids.count(258) == 1, ids
assert tok.eos_token_id == 258 and tok.pad_token_id == 256, (tok.eos_token_id, tok.pad_token_id)
assert tok.decode([35, 35, 32, 55, 258], skip_special_tokens=True) == "## 7"

model = AutoModelForCausalLM.from_pretrained(folder)
assert type(model).__name__ == "Qwen2ForCausalLM", type(model).__name__
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits
assert logits.shape == (1, len(ids), 259) and torch.isfinite(logits).all()
print("transformers loads the task's model folder: OK")
