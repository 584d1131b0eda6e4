#!/usr/bin/env python3
"""The Hugging Face transformers / PyTorch eager side of bench/bench_model.cpp: the same configs
(random weights, float32), batch shapes and thread count, so that the two can be read side by side.

    pip install torch transformers
    VERL_BENCH_THREADS=2 python3 tools/scripts/bench_hf_baseline.py
    VERL_BENCH_THREADS=2 build/bench/bench_model

Reports, per config (tiny = tests/data/models/tiny-qwen2's shapes, 30M = a narrow Qwen2 with a
32000-token vocabulary):
  generate           model.generate, greedy with the KV cache, 8 prompts x 16 tokens -> 64 new
                     tokens each (no early stop), generated tokens per second;
  forward+backward   8 sequences x 256 tokens, mean log-prob of the next tokens, backward,
                     tokens per second.
"""

import os
import time

import torch
import transformers

GENERATE_BATCH, PROMPT_LENGTH, NEW_TOKENS = 8, 16, 64
TRAIN_SEQUENCES, TRAIN_LENGTH = 8, 256

CONFIGS = {
    "tiny": dict(vocab_size=1408, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),
    "30M": dict(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=5, num_attention_heads=8,
                num_key_value_heads=4),
}


def prompts(batch, length, vocab):
    return torch.tensor([[(b * 131 + t * 17 + 3) % vocab for t in range(length)] for b in range(batch)])


def timed(fn, min_seconds=2.0):
    fn()  # warm-up
    runs, start = 0, time.perf_counter()
    while True:
        fn()
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return elapsed / runs


def main():
    threads = int(os.environ.get("VERL_BENCH_THREADS", "0")) or os.cpu_count()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}")
    for name, shape in CONFIGS.items():
        config = transformers.Qwen2Config(max_position_embeddings=4096, tie_word_embeddings=True, **shape)
        model = transformers.AutoModelForCausalLM.from_config(config).float()
        parameters = sum(p.numel() for p in model.parameters())

        model.eval()
        input_ids = prompts(GENERATE_BATCH, PROMPT_LENGTH, config.vocab_size)
        attention_mask = torch.ones_like(input_ids)

        def generate():
            with torch.no_grad():
                model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
                               max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=0,
                               eos_token_id=None)

        generate_seconds = timed(generate)

        model.train()
        train_ids = prompts(TRAIN_SEQUENCES, TRAIN_LENGTH, config.vocab_size)
        positions = torch.arange(TRAIN_LENGTH).expand(TRAIN_SEQUENCES, -1)
        tokens = train_ids.numel()

        def forward_backward():
            logits = model(input_ids=train_ids, position_ids=positions).logits
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            targets = torch.roll(train_ids, shifts=-1, dims=-1)
            loss = torch.gather(log_probs, -1, targets.unsqueeze(-1)).sum() / tokens
            loss.backward()

        train_seconds = timed(forward_backward)
        print(f"{name:>5} ({parameters / 1e6:.1f}M parameters): generate {GENERATE_BATCH * NEW_TOKENS / generate_seconds:,.0f} "
              f"tokens/s ({generate_seconds * 1e3:.1f} ms per call), forward+backward {tokens / train_seconds:,.0f} tokens/s "
              f"({train_seconds * 1e3:.1f} ms per step)")


if __name__ == "__main__":
    main()
