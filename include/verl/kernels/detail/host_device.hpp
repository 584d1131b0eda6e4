// Marks the element-wise math shared by a kernel (.cuh) and its host-side header (.hpp) as callable
// from both sides; a g++-only build sees plain inline functions.
#pragma once

#if defined(__CUDACC__)
#define VERL_KERNELS_HD __host__ __device__ __forceinline__
#else
#define VERL_KERNELS_HD inline
#endif

namespace verl::kernels::detail {

/// a * b and a + b rounded on their own, never contracted into an FMA by nvcc: where verl's
/// float32 arithmetic is reproduced step by step (sums of squares in batch order).
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
/// IEEE division whatever -prec-div / --use_fast_math say.
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
#else
inline float mul_rn(float a, float b) { return a * b; }
inline float add_rn(float a, float b) { return a + b; }
inline float div_rn(float a, float b) { return a / b; }
#endif

}  // namespace verl::kernels::detail
