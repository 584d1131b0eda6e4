// Module header: the CPU compute layer — SIMD helpers, the GEMM family with its thread pool and
// decode precisions, and the row kernels (softmax, RMSNorm, SwiGLU) the reference transformer runs.
#pragma once

#include "verl/cpu/vector_math.hpp"
#include "verl/cpu/huge_pages.hpp"
#include "verl/cpu/thread_pool.hpp"
#include "verl/cpu/decode_precision.hpp"
#include "verl/cpu/gemm.hpp"
#include "verl/cpu/softmax.hpp"
#include "verl/cpu/argmax.hpp"
#include "verl/cpu/rms_norm.hpp"
#include "verl/cpu/swiglu.hpp"
