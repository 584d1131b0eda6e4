// verl-cpp: configuration macros shared by every header.
#pragma once

#define VERL_VERSION_MAJOR 0
#define VERL_VERSION_MINOR 1
#define VERL_VERSION_PATCH 0
#define VERL_VERSION_STRING "0.1.0"

// Functions that are callable from host and device code when compiled by nvcc.
#if defined(__CUDACC__)
#define VERL_HOST_DEVICE __host__ __device__
#define VERL_DEVICE __device__
#else
#define VERL_HOST_DEVICE
#define VERL_DEVICE
#endif

#if defined(_MSC_VER)
#define VERL_FORCE_INLINE __forceinline
#else
#define VERL_FORCE_INLINE inline __attribute__((always_inline))
#endif

// Eigen-style compile-time assertion: MESSAGE is an UPPER_CASE sentence-like token, so that the
// diagnostic names the misuse (tests in tests/compile_fail assert on the token).
#define VERL_STATIC_ASSERT(CONDITION, MESSAGE) static_assert(CONDITION, #MESSAGE)

namespace verl {
inline constexpr const char* version_string = VERL_VERSION_STRING;
}  // namespace verl
