// Shared by the CUDA kernel tests: skip clearly when no GPU is present (the build still proves
// the kernels compile and link), check CUDA calls with the failing expression in the message, and
// move host matrices to the device and back.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "verl/core/tensor.hpp"
#include "verl/kernels/detail/cuda_check.cuh"

namespace verl::testing {

/// A device copy of a host matrix (row-major, as verl's MatrixF).
inline kernels::DeviceBuffer<float> upload(const MatrixF& m) {
  kernels::DeviceBuffer<float> d(static_cast<std::size_t>(m.size()));
  d.upload(m.data());
  return d;
}

/// A (rows, cols) host matrix from a device array.
inline MatrixF download(const kernels::DeviceBuffer<float>& d, Index rows, Index cols) {
  MatrixF m(rows, cols);
  d.download(m.data());
  return m;
}

/// Why this process cannot run kernels ("" when a device is usable).
inline std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device present";
  return {};
}

}  // namespace verl::testing

/// First statement of every CUDA test: GTEST_SKIP with the reason when there is no GPU.
#define VERL_REQUIRE_GPU()                                                              \
  do {                                                                                  \
    static const std::string verl_gpu_reason = ::verl::testing::cuda_unavailable_reason(); \
    if (!verl_gpu_reason.empty()) GTEST_SKIP() << "skipped: " << verl_gpu_reason;        \
  } while (false)

#define VERL_CUDA_EXPECT_OK(expr)                                                              \
  do {                                                                                         \
    const cudaError_t verl_status = (expr);                                                    \
    ASSERT_EQ(verl_status, cudaSuccess) << #expr << ": " << cudaGetErrorString(verl_status);   \
  } while (false)
