#!/usr/bin/env python3
"""Writes the GGUF test fixtures under tests/data/gguf/ with the `gguf` PyPI package.

    python3 -m venv /tmp/ggufenv && /tmp/ggufenv/bin/pip install gguf numpy
    /tmp/ggufenv/bin/python tools/scripts/make_gguf_fixtures.py

quants.gguf     one tensor per ggml type the C++ reader dequantizes, of shape (3, 256): for the types
                gguf.quants can quantize, random normal data quantized by it ("<TYPE>"), and for
                every block type also random raw blocks ("<TYPE>.raw": every bit pattern of the
                quants, with finite f16 scales of either sign).
quants_expected.bin
                what gguf.quants.dequantize gives for each of them, as little-endian float32, the
                tensors one after another in the order of quants.json.
metadata.gguf   one key of every metadata type (arrays of numbers, strings and arrays included), a
                custom general.alignment of 64, and two small tensors; the fuzz tests start from it.
quants.json     that order: [{"name", "type", "shape", "offset" (in floats)}].
tiny-llama.gguf, tiny-qwen2.gguf, tiny-qwen3.gguf
                the test models of tests/data/models written as llama.cpp's convert_hf_to_gguf.py
                lays them out: its tensor names, dims fastest-varying first, bfloat16 matrices and
                float32 norms, the rows of q_proj and k_proj (and their biases) permuted for
                llama's interleaved rope (not for qwen2/qwen3), no output.weight for a tied head,
                and the tokenizer as tokenizer.ggml.* keys. Llama's llama3 rope scaling is left
                out (llama.cpp would store it as a rope_freqs tensor; test_gguf_model adds one
                byte by byte to check the reader), so tiny-llama.gguf is tiny-llama without rope
                scaling.
tiny-llama-q8_0.gguf, tiny-llama-q4_0.gguf, tiny-llama-q4_1.gguf, tiny-llama-q5_0.gguf,
tiny-llama-q5_1.gguf, tiny-llama-q4_k.gguf, tiny-llama-q5_k.gguf, tiny-llama-q6_k.gguf,
tiny-llama-f16.gguf, tiny-llama-bf16.gguf
                one random llama per weight type (QUANT_MODEL_TYPES), every matrix in that type
                (token_embd.weight and an untied output.weight included, as llama.cpp's --pure
                quantization lays them out) and the norms float32: 1 layer, 4 heads of 64 with 2
                KV heads (hidden 256; F16 and BF16: hidden 128, heads of 32, to keep them small),
                intermediate 256, vocabulary 256, rope theta 10000, no tokenizer. For the types
                gguf.quants can quantize, normal weights (std WEIGHT_STD) in Hugging Face's order,
                q and k rows permuted for llama's rope, then quantized; gguf cannot quantize the
                K-quants, so their matrices are random raw blocks (random_blocks, scales
                K_QUANT_SCALES, Q4_K/Q5_K centred by centre_k_blocks) and the model is what those
                blocks dequantize to. tools/scripts/make_gguf_quant_golden.py writes
                transformers' logits and greedy ids for them (quant_models.json,
                quant_models_logits.bin).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "gguf"
MODELS = ROOT / "tests" / "data" / "models"

ROWS, COLS = 3, 256
QUANTIZABLE = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]
# Where each block type keeps its f16 scales (byte offsets inside a block).
BLOCK_SCALES = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
}


def random_blocks(rng: np.random.Generator, qtype: Q, rows: int = ROWS, cols: int = COLS,
                  scale_range: tuple[float, float] = (0.001, 0.2)) -> np.ndarray:
    """(rows, bytes per row) random blocks of `qtype`: every quant bit random, the f16 scales of
    random sign with magnitudes uniform in `scale_range`."""
    block_elements, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    blocks_per_row = cols // block_elements
    raw = rng.integers(0, 256, size=(rows * blocks_per_row, block_bytes), dtype=np.uint8)
    for at in BLOCK_SCALES[qtype]:
        scales = (rng.uniform(*scale_range, size=raw.shape[0]) * rng.choice([-1.0, 1.0], size=raw.shape[0]))
        raw[:, at:at + 2] = scales.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw.reshape(rows, blocks_per_row * block_bytes)


def write_quants() -> None:
    rng = np.random.default_rng(20240527)
    writer = gguf.GGUFWriter(str(OUT / "quants.gguf"), "quants")
    expected: list[np.ndarray] = []
    index = []
    offset = 0

    def add(name: str, qtype: Q, stored: np.ndarray) -> None:
        nonlocal offset
        values = gguf.quants.dequantize(stored, qtype).astype(np.float32).reshape(ROWS, COLS)
        # Quantized data goes in as bytes, (rows, bytes per row); the writer derives the element shape.
        writer.add_tensor(name, stored, raw_dtype=qtype if stored.dtype == np.uint8 else None)
        index.append({"name": name, "type": qtype.name, "shape": [ROWS, COLS], "offset": offset})
        expected.append(values.reshape(-1))
        offset += values.size

    for qtype in QUANTIZABLE:
        data = rng.normal(0.0, 1.0, size=(ROWS, COLS)).astype(np.float32)
        stored = gguf.quants.quantize(data, qtype)
        if qtype == Q.BF16:
            stored = stored.view(np.uint8).reshape(ROWS, -1)
        add(qtype.name, qtype, stored)
    for qtype in BLOCK_SCALES:
        add(f"{qtype.name}.raw", qtype, random_blocks(rng, qtype))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    np.concatenate(expected).astype("<f4").tofile(OUT / "quants_expected.bin")
    (OUT / "quants.json").write_text(json.dumps(index, indent=1) + "\n")


def write_metadata() -> None:
    writer = gguf.GGUFWriter(str(OUT / "metadata.gguf"), "test")
    writer.add_custom_alignment(64)
    writer.add_uint8("test.u8", 200)
    writer.add_int8("test.i8", -100)
    writer.add_uint16("test.u16", 60000)
    writer.add_int16("test.i16", -30000)
    writer.add_uint32("test.u32", 4000000000)
    writer.add_int32("test.i32", -2000000000)
    writer.add_float32("test.f32", 0.1)
    writer.add_bool("test.bool", True)
    writer.add_string("test.string", "héllo GGUF")
    writer.add_uint64("test.u64", 2**63 + 5)
    writer.add_int64("test.i64", -(2**62))
    writer.add_float64("test.f64", -1.5e300)
    writer.add_array("test.array_i32", [1, -2, 3])
    writer.add_array("test.array_f32", [0.5, -0.25])
    writer.add_array("test.array_string", ["a", "", "bc"])
    writer.add_array("test.array_nested", [[1, 2], [3]])
    writer.add_tensor("small.f32", np.arange(6, dtype=np.float32).reshape(2, 3))
    writer.add_tensor("small.q8_0", gguf.quants.quantize(np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32), Q.Q8_0),
                      raw_dtype=Q.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# ---------------------------------------------------------------------------------------------
# Tiny models


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    blob = path.read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    data = blob[8 + length:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        assert info["dtype"] == "BF16", (name, info["dtype"])
        bits = np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint32) << 16
        tensors[name] = bits.view(np.float32).reshape(info["shape"])
    return tensors


LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(name: str) -> str:
    if name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if name == "model.norm.weight":
        return "output_norm.weight"
    if name == "lm_head.weight":
        return "output.weight"
    parts = name.split(".")
    assert parts[:2] == ["model", "layers"], name
    return f"blk.{parts[2]}.{LAYER_NAMES['.'.join(parts[3:])]}"


def interleave_rope_rows(rows: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's order for llama's rope: in each head, the two halves of the rotary pairs
    interleaved (row i of the first half, then row i of the second half, ...)."""
    shape = rows.shape
    per_head = shape[0] // heads
    return rows.reshape(heads, 2, per_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def tokenizer_metadata(writer: gguf.GGUFWriter, folder: Path, vocab_size: int, pre: str, add_bos: bool) -> None:
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [gguf.TokenType.UNUSED] * vocab_size
    for token, token_id in tokenizer["model"]["vocab"].items():
        tokens[token_id] = token
        types[token_id] = gguf.TokenType.NORMAL
    for added in tokenizer["added_tokens"]:
        tokens[added["id"]] = added["content"]
        types[added["id"]] = gguf.TokenType.CONTROL if added["special"] else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    ids = {token: i for i, token in enumerate(tokens)}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for key, setter in (("bos_token", writer.add_bos_token_id), ("eos_token", writer.add_eos_token_id),
                        ("pad_token", writer.add_pad_token_id)):
        if config.get(key):
            setter(ids[config[key]])
    writer.add_add_bos_token(add_bos)
    writer.add_chat_template(config["chat_template"])


def write_model(name: str, arch: str, pre: str, add_bos: bool) -> None:
    folder = MODELS / name
    config = json.loads((folder / "config.json").read_text())
    tensors = read_safetensors(folder / "model.safetensors")
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    rope = config.get("rope_parameters") or {}
    writer = gguf.GGUFWriter(str(OUT / f"{name}.gguf"), arch)
    writer.add_name(name)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(rope.get("rope_theta", config.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    tokenizer_metadata(writer, folder, config["vocab_size"], pre, add_bos)
    for hf_name, value in tensors.items():
        if arch == "llama" and hf_name.endswith(("q_proj.weight", "q_proj.bias")):
            value = interleave_rope_rows(value, heads)
        elif arch == "llama" and hf_name.endswith(("k_proj.weight", "k_proj.bias")):
            value = interleave_rope_rows(value, kv_heads)
        if value.ndim == 1:
            writer.add_tensor(gguf_name(hf_name), value.astype(np.float32))
        else:
            bits = (value.astype(np.float32).view(np.uint32) >> 16).astype("<u2")  # exact: the values are bf16
            writer.add_tensor(gguf_name(hf_name), bits.view(np.uint8), raw_dtype=Q.BF16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# ---------------------------------------------------------------------------------------------
# One tiny random llama per weight type


# The types, llama.cpp's file type for a file all of that type, and its sizes: row lengths must
# be multiples of the block (256 for the K-quants); F16 and BF16 use a narrower model to keep the
# files small.
QUANT_MODEL_TYPES = {
    Q.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0, Q.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0,
    Q.Q4_1: gguf.LlamaFileType.MOSTLY_Q4_1, Q.Q5_0: gguf.LlamaFileType.MOSTLY_Q5_0,
    Q.Q5_1: gguf.LlamaFileType.MOSTLY_Q5_1, Q.Q4_K: gguf.LlamaFileType.MOSTLY_Q4_K_S,
    Q.Q5_K: gguf.LlamaFileType.MOSTLY_Q5_K_S, Q.Q6_K: gguf.LlamaFileType.MOSTLY_Q6_K,
    Q.F16: gguf.LlamaFileType.MOSTLY_F16, Q.BF16: gguf.LlamaFileType.MOSTLY_BF16,
}
QUANT_MODEL_SIZES = {"layers": 1, "heads": 4, "kv_heads": 2, "hidden": 256, "intermediate": 256, "vocab": 256}
NARROW_TYPES = {Q.F16: 128, Q.BF16: 128}  # their hidden size
WEIGHT_STD = 0.05
# gguf.quants cannot quantize the K-quants: their matrices are random raw blocks whose f16 scales
# are drawn so that the weights' standard deviation is about WEIGHT_STD (some of Q6_K's subnormal).
K_QUANT_SCALES = {Q.Q4_K: (2e-4, 4e-4), Q.Q5_K: (1e-4, 2e-4), Q.Q6_K: (3.5e-5, 7e-5)}


def centre_k_blocks(raw: np.ndarray, qtype: Q) -> np.ndarray:
    """Q4_K and Q5_K blocks whose weights d * sc * q - dmin * m are centred, like quantized
    weights: every sub-block's 6-bit min m equal to its scale sc (bytes 4-11 of the packed scales
    derived from bytes 0-3 and random nibbles) and dmin = d * (levels - 1) / 2."""
    blocks = raw.reshape(-1, gguf.GGML_QUANT_SIZES[qtype][1]).copy()
    levels = 16 if qtype == Q.Q4_K else 32
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    blocks[:, 2:4] = (d * (levels - 1) / 2).astype(np.float16).view(np.uint8).reshape(-1, 2)
    blocks[:, 8:12] = blocks[:, 4:8]  # low 6 bits: sc and m of sub-blocks 0-3; high 2 bits: of 4-7
    nibbles = blocks[:, 12:16] & 0x0F
    blocks[:, 12:16] = nibbles | (nibbles << 4)  # low 4 bits of sc and m of sub-blocks 4-7
    return blocks.reshape(raw.shape)


def quant_model_file(qtype: Q) -> str:
    return f"tiny-llama-{qtype.name.lower()}.gguf"


def write_quant_model(qtype: Q) -> None:
    sizes = dict(QUANT_MODEL_SIZES, hidden=NARROW_TYPES.get(qtype, QUANT_MODEL_SIZES["hidden"]))
    hidden, heads, kv_heads = sizes["hidden"], sizes["heads"], sizes["kv_heads"]
    head_dim = hidden // heads
    rng = np.random.default_rng([20261128, int(qtype)])
    writer = gguf.GGUFWriter(str(OUT / quant_model_file(qtype)), "llama")
    writer.add_name(quant_model_file(qtype).removesuffix(".gguf"))
    writer.add_block_count(sizes["layers"])
    writer.add_context_length(64)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(sizes["intermediate"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(sizes["vocab"])
    writer.add_file_type(QUANT_MODEL_TYPES[qtype])

    def norm(name: str) -> None:
        writer.add_tensor(name, (1.0 + 0.1 * rng.normal(size=hidden)).astype(np.float32))

    def matrix(name: str, rows: int, cols: int, rope_heads: int = 0) -> None:
        if qtype in K_QUANT_SCALES:
            # The raw blocks are the model (no Hugging Face order to permute from).
            raw = random_blocks(rng, qtype, rows, cols, K_QUANT_SCALES[qtype])
            if qtype in (Q.Q4_K, Q.Q5_K):
                raw = centre_k_blocks(raw, qtype)
            writer.add_tensor(name, raw, raw_dtype=qtype)
            return
        values = rng.normal(0.0, WEIGHT_STD, size=(rows, cols)).astype(np.float32)
        if rope_heads:
            values = interleave_rope_rows(values, rope_heads)
        stored = gguf.quants.quantize(values, qtype)
        if qtype == Q.F16:
            writer.add_tensor(name, stored)
        else:
            writer.add_tensor(name, stored.view(np.uint8).reshape(rows, -1), raw_dtype=qtype)

    matrix("token_embd.weight", sizes["vocab"], hidden)
    for layer in range(sizes["layers"]):
        norm(f"blk.{layer}.attn_norm.weight")
        matrix(f"blk.{layer}.attn_q.weight", heads * head_dim, hidden, rope_heads=heads)
        matrix(f"blk.{layer}.attn_k.weight", kv_heads * head_dim, hidden, rope_heads=kv_heads)
        matrix(f"blk.{layer}.attn_v.weight", kv_heads * head_dim, hidden)
        matrix(f"blk.{layer}.attn_output.weight", hidden, heads * head_dim)
        norm(f"blk.{layer}.ffn_norm.weight")
        matrix(f"blk.{layer}.ffn_gate.weight", sizes["intermediate"], hidden)
        matrix(f"blk.{layer}.ffn_up.weight", sizes["intermediate"], hidden)
        matrix(f"blk.{layer}.ffn_down.weight", hidden, sizes["intermediate"])
    norm("output_norm.weight")
    matrix("output.weight", sizes["vocab"], hidden)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    write_quants()
    write_metadata()
    write_model("tiny-llama", "llama", "llama-bpe", True)
    write_model("tiny-qwen2", "qwen2", "qwen2", False)
    write_model("tiny-qwen3", "qwen3", "qwen2", False)
    for qtype in QUANT_MODEL_TYPES:
        write_quant_model(qtype)
    for path in sorted(OUT.iterdir()):
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
