// CUDA runtime errors as exceptions: every kernel wrapper checks its launch and the runtime calls
// it makes, and a failure names the expression and where it happened (cudaGetErrorString).
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace verl::kernels {

/// Raised when a CUDA runtime call or a kernel launch fails.
class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t status, const std::string& what) : std::runtime_error(what), status_(status) {}
  [[nodiscard]] cudaError_t status() const noexcept { return status_; }

 private:
  cudaError_t status_;
};

namespace detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* expression, const char* file, int line) {
  throw CudaError(status, std::string(expression) + " failed at " + file + ":" + std::to_string(line) + ": " +
                              cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

}  // namespace detail
}  // namespace verl::kernels

/// Throws verl::kernels::CudaError when `expr` (a cudaError_t) is not cudaSuccess.
#define VERL_CUDA_CHECK(expr)                                                                  \
  do {                                                                                         \
    const cudaError_t verl_cuda_status = (expr);                                               \
    if (verl_cuda_status != cudaSuccess)                                                       \
      ::verl::kernels::detail::throw_cuda_error(verl_cuda_status, #expr, __FILE__, __LINE__);  \
  } while (false)

/// After a kernel launch: a bad configuration surfaces here rather than at the next sync.
#define VERL_CUDA_CHECK_LAUNCH() VERL_CUDA_CHECK(cudaGetLastError())
