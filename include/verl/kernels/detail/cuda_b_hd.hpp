// Marks the element-wise math shared by a kernel (.cuh) and its host-side header (.hpp) as callable
// from both sides; a g++-only build sees plain inline functions.
#pragma once

#if defined(__CUDACC__)
#define VERL_KERNELS_HD __host__ __device__ __forceinline__
#else
#define VERL_KERNELS_HD inline
#endif
