// 16-byte vector loads and stores of fp32 / bf16 rows as float arrays, and the row split a
// vectorized kernel uses: a scalar head up to the first 16-byte boundary, whole vectors, a scalar
// tail (rows of V not a multiple of 8 start at any element offset).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <concepts>
#include <cstdint>

#include "verl/kernels/detail/launch.hpp"

namespace verl::kernels::detail {

template <class T>
concept DeviceLogitScalar = std::same_as<T, float> || std::same_as<T, __nv_bfloat16>;

template <class Scalar>
__device__ __forceinline__ float load_as_float(const Scalar* p) {
  if constexpr (std::same_as<Scalar, float>) {
    return __ldg(p);
  } else {
    return __bfloat162float(__ldg(p));
  }
}

template <class Scalar>
__device__ __forceinline__ Scalar float_to(float v) {
  if constexpr (std::same_as<Scalar, float>) {
    return v;
  } else {
    return __float2bfloat16_rn(v);  // round to nearest even, as Eigen::bfloat16(float)
  }
}

/// One 16-byte vector of Scalar as floats.
template <class Scalar>
struct FloatVector {
  static constexpr int size = elements_per_vector<Scalar>();
  float v[size];
};

/// 16 raw bytes as a vector of floats.
template <class Scalar>
__device__ __forceinline__ FloatVector<Scalar> bits_to_vector(const uint4& raw) {
  FloatVector<Scalar> out;
  if constexpr (std::same_as<Scalar, float>) {
    out.v[0] = __uint_as_float(raw.x);
    out.v[1] = __uint_as_float(raw.y);
    out.v[2] = __uint_as_float(raw.z);
    out.v[3] = __uint_as_float(raw.w);
  } else {
    const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // bf16 is the upper half of a float: widening is a shift, exact (lower address = low half).
      out.v[2 * i] = __uint_as_float(words[i] << 16);
      out.v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
    }
  }
  return out;
}

/// Loads 16 bytes at `p` (16-byte aligned) through the read-only path (not for aliased output).
template <class Scalar>
__device__ __forceinline__ FloatVector<Scalar> load_vector(const Scalar* p) {
  return bits_to_vector<Scalar>(__ldg(reinterpret_cast<const uint4*>(p)));
}

/// A plain (coherent) load of one element as float: for buffers the kernel also writes.
template <class Scalar>
__device__ __forceinline__ float plain_load_as_float(const Scalar* p) {
  if constexpr (std::same_as<Scalar, float>) {
    return *p;
  } else {
    return __bfloat162float(*p);
  }
}

/// Stores a vector of floats as Scalar at `p` (16-byte aligned).
template <class Scalar>
__device__ __forceinline__ void store_vector(Scalar* p, const FloatVector<Scalar>& x) {
  uint4 raw;
  if constexpr (std::same_as<Scalar, float>) {
    raw = make_uint4(__float_as_uint(x.v[0]), __float_as_uint(x.v[1]), __float_as_uint(x.v[2]), __float_as_uint(x.v[3]));
  } else {
    std::uint32_t words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(x.v[2 * i], x.v[2 * i + 1]);  // .x is the lower address
      words[i] = *reinterpret_cast<const std::uint32_t*>(&pair);
    }
    raw = make_uint4(words[0], words[1], words[2], words[3]);
  }
  *reinterpret_cast<uint4*>(p) = raw;
}

/// A row split for vector access: [0, head) scalar, [head, head + vectors * size) vectors,
/// then a scalar tail up to `count`.
struct RowSplit {
  std::int64_t head;
  std::int64_t vectors;
  std::int64_t tail_begin;
};

template <class Scalar>
__device__ __forceinline__ RowSplit split_row(const Scalar* row, std::int64_t count) {
  constexpr int size = elements_per_vector<Scalar>();
  const std::int64_t head = misaligned_head(reinterpret_cast<std::uintptr_t>(row), sizeof(Scalar), count);
  const std::int64_t vectors = (count - head) / size;
  return {head, vectors, head + vectors * size};
}

}  // namespace verl::kernels::detail
