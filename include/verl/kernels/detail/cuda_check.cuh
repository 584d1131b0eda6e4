// CUDA runtime errors as exceptions: every kernel wrapper checks its launch and the runtime calls
// it makes, and a failure names the expression and where it happened (cudaGetErrorString).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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

/// Declares a kernel defined in a header. A plain __global__ function gets a strong host stub in
/// every .cu file that includes the header, so a program with two such files fails to link; as a
/// function template (one defaulted, unused parameter) each use is a mergeable instantiation.
/// Launch it as any kernel: name<<<grid, block>>>(args).
#define VERL_HEADER_KERNEL template <int = 0> __global__

/// Throws verl::kernels::CudaError when `expr` (a cudaError_t) is not cudaSuccess.
#define VERL_CUDA_CHECK(expr)                                                                  \
  do {                                                                                         \
    const cudaError_t verl_cuda_status = (expr);                                               \
    if (verl_cuda_status != cudaSuccess)                                                       \
      ::verl::kernels::detail::throw_cuda_error(verl_cuda_status, #expr, __FILE__, __LINE__);  \
  } while (false)

/// After a kernel launch: a bad configuration surfaces here rather than at the next sync.
#define VERL_CUDA_CHECK_LAUNCH() VERL_CUDA_CHECK(cudaGetLastError())

namespace verl::kernels {

/// An owning device array for host-side conveniences and tests (synchronous copies; kernels
/// themselves take caller-provided pointers).
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t size) : size_(size) {
    if (size_ > 0) VERL_CUDA_CHECK(cudaMalloc(&data_, size_ * sizeof(T)));
  }
  DeviceBuffer(const T* host, std::size_t size) : DeviceBuffer(size) { upload(host); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);  // no throw from a destructor
  }
  [[nodiscard]] T* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  void upload(const void* host) {
    if (size_ > 0) VERL_CUDA_CHECK(cudaMemcpy(data_, host, size_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  void download(void* host) const {
    if (size_ > 0) VERL_CUDA_CHECK(cudaMemcpy(host, data_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
  }
  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> out(size_);
    download(out.data());
    return out;
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace verl::kernels
