#!/usr/bin/env python3
"""Writes the safetensors test data (tests/data/safetensors/) with the official `safetensors`
package, so that our C++ reader is checked against files it did not write itself.

    pip install safetensors numpy
    python3 tools/scripts/make_safetensors_golden.py [--out tests/data/safetensors]

Outputs:
  all_dtypes.safetensors   one tensor per dtype (F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL), a
                           scalar, an empty and a rank-3 tensor, metadata {"format": "pt"}
  all_dtypes.expected.json per tensor: dtype, shape, and the values as float32 bit patterns
                           (floating dtypes, exact incl. inf/nan/-0) or integers
  sharded/                 a two-shard checkpoint with model.safetensors.index.json, laid out the
                           way transformers' save_pretrained writes one
"""
import argparse
import json
import os
import struct

import numpy as np
import safetensors
from safetensors.numpy import save_file


def float32_bits(values):
    return [int(b) for b in np.asarray(values, dtype=np.float32).reshape(-1).view(np.uint32)]


def bf16_bytes_from_f32(values):
    """bfloat16 bytes by truncating float32 values that are exactly representable in bf16."""
    bits = np.asarray(values, dtype=np.float32).reshape(-1).view(np.uint32)
    assert np.all((bits & 0xFFFF) == 0), "bf16 test values must be exact"
    return (bits >> 16).astype("<u2").tobytes()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "../../tests/data/safetensors"))
    out = os.path.abspath(parser.parse_args().out)
    os.makedirs(os.path.join(out, "sharded"), exist_ok=True)
    rng = np.random.default_rng(20240601)

    f16_values = np.array(
        [[0.0, -0.0, 1.0, -2.5, 65504.0, 6.0e-8],  # 6e-8 rounds to the smallest subnormal
         [np.inf, -np.inf, 0.333251953125, 1e-5, -7.0, 3.140625]], dtype=np.float16)
    bf16_values = np.array([1.0, -0.5, 3.140625, 1.0e38, -0.0, np.inf, 2.0**-130, 7.0], dtype=np.float32)
    bf16_values = (bf16_values.view(np.uint32) & 0xFFFF0000).view(np.float32)  # make them exact

    numpy_tensors = {
        "f64.vector": rng.standard_normal(5).astype(np.float64),
        "f32.matrix": rng.standard_normal((3, 4)).astype(np.float32),
        "f16.matrix": f16_values,
        "i64.vector": np.array([0, -1, 2**40, -(2**62), 7], dtype=np.int64),
        "i32.matrix": np.arange(-3, 3, dtype=np.int32).reshape(2, 3),
        "i16.vector": np.array([-32768, 0, 32767], dtype=np.int16),
        "i8.vector": np.array([-128, -1, 127], dtype=np.int8),
        "u8.vector": np.array([0, 1, 255], dtype=np.uint8),
        "bool.vector": np.array([True, False, True, True], dtype=np.bool_),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "rank3": np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8.0,
    }
    # numpy has no bfloat16: the Rust-backed serializer takes a dtype string and a raw buffer.
    bf16_buffer = np.frombuffer(bf16_bytes_from_f32(bf16_values), dtype="<u2").copy()
    buffers = dict(numpy_tensors)
    buffers["bf16.vector"] = bf16_buffer
    specs = {}
    for name, value in buffers.items():
        value = value.copy(order="C")
        buffers[name] = value  # keeps the buffer alive while serializing
        dtype = "bfloat16" if name == "bf16.vector" else value.dtype.name
        specs[name] = safetensors.TensorSpec(dtype=dtype, shape=list(value.shape), data_ptr=value.ctypes.data,
                                             data_len=value.nbytes)
    serialized = safetensors.serialize(specs, metadata={"format": "pt", "source": "make_safetensors_golden.py"})
    with open(os.path.join(out, "all_dtypes.safetensors"), "wb") as f:
        f.write(serialized)

    expected = {}
    for name, value in numpy_tensors.items():
        entry = {"shape": list(value.shape)}
        if value.dtype.kind == "f":
            entry["f32_bits"] = float32_bits(value.astype(np.float32))
        else:
            entry["ints"] = [int(v) for v in value.reshape(-1)]
        expected[name] = entry
    expected["bf16.vector"] = {"shape": [len(bf16_values)], "f32_bits": float32_bits(bf16_values)}
    dtype_names = {"f64.vector": "F64", "f32.matrix": "F32", "f16.matrix": "F16", "i64.vector": "I64",
                   "i32.matrix": "I32", "i16.vector": "I16", "i8.vector": "I8", "u8.vector": "U8",
                   "bool.vector": "BOOL", "scalar": "F32", "empty": "F32", "rank3": "F32", "bf16.vector": "BF16"}
    for name, dtype in dtype_names.items():
        expected[name]["dtype"] = dtype
    # Cross-check: the header the package wrote says the same dtypes and shapes.
    (header_length,) = struct.unpack("<Q", serialized[:8])
    header = json.loads(serialized[8:8 + header_length])
    for name, entry in expected.items():
        assert header[name]["dtype"] == entry["dtype"] and header[name]["shape"] == entry["shape"], name
    with open(os.path.join(out, "all_dtypes.expected.json"), "w") as f:
        json.dump({"metadata": header["__metadata__"], "tensors": expected}, f, indent=1, sort_keys=True)
        f.write("\n")

    # A two-shard checkpoint with an index, like transformers' save_pretrained(max_shard_size=...).
    shard_tensors = [
        {"model.embed_tokens.weight": rng.standard_normal((6, 4)).astype(np.float32),
         "model.norm.weight": np.ones(4, dtype=np.float32)},
        {"lm_head.weight": rng.standard_normal((6, 4)).astype(np.float32),
         "model.layers.0.mlp.up_proj.weight": rng.standard_normal((8, 4)).astype(np.float32)},
    ]
    weight_map, total_size, sharded_expected = {}, 0, {}
    for k, tensors in enumerate(shard_tensors):
        file_name = f"model-{k + 1:05d}-of-{len(shard_tensors):05d}.safetensors"
        save_file(tensors, os.path.join(out, "sharded", file_name), metadata={"format": "pt"})
        for name, value in tensors.items():
            weight_map[name] = file_name
            total_size += value.nbytes
            sharded_expected[name] = {"file": file_name, "shape": list(value.shape),
                                      "f32_bits": float32_bits(value)}
    with open(os.path.join(out, "sharded", "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))}, f,
                  indent=2)
        f.write("\n")
    with open(os.path.join(out, "sharded.expected.json"), "w") as f:
        json.dump(sharded_expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
