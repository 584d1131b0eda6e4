// C (+)= A B for the reference transformer, with operands given by pointer and strides so that
// transposed views cost nothing: A(i, k) = a.data[i * a.row_stride + k * a.col_stride].
//
// float runs a packed, register-blocked kernel selected at run time (AVX-512 or AVX2 + FMA, as the
// logits kernels do), so a default build without -march flags still gets the CPU's vector width;
// Eigen's products are compiled for the build's baseline ISA (SSE2 unless told otherwise), several
// times slower. double, and CPUs without AVX2, use Eigen. The blocking (KC, MC, NC) and the order
// of the multiply-adds depend only on the shapes, so results are reproducible.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "verl/cpu/vector_math.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/cpu/decode_precision.hpp"
#include "verl/core/half_float.hpp"
#include "verl/cpu/thread_pool.hpp"

#if VERL_HAS_X86_DISPATCH
#include <immintrin.h>
#endif

// AMX bfloat16 tiles for bfloat16 decode weights: x86-64 Linux (the tile state needs the kernel's
// permission) with compilers that have the intrinsics.
#if VERL_HAS_X86_DISPATCH && defined(__x86_64__) && defined(__linux__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define VERL_HAS_AMX_DISPATCH 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#define VERL_HAS_AMX_DISPATCH 0
#endif

namespace verl::cpu {

/// A strided read-only matrix operand.
template <class S>
struct Operand {
  const S* data;
  Index row_stride;
  Index col_stride;
  [[nodiscard]] S at(Index i, Index k) const { return data[i * row_stride + k * col_stride]; }
  [[nodiscard]] Operand transposed() const { return {data, col_stride, row_stride}; }
};

/// A row-major matrix (rows `stride` apart) as an operand, or its transpose.
template <class S>
Operand<S> rows_of(const S* data, Index stride) {
  return {data, stride, 1};
}
template <class S>
Operand<S> transpose_of(const S* data, Index stride) {
  return {data, 1, stride};
}

namespace gemm_detail {

/// Reduction depth of the packed blocks of a product of depth k: the fewest blocks of at most
/// max_kc_block, of equal depth (rounded up to even, so that bfloat16 panels hold whole pairs of k in
/// every block but the last). Every element of C is summed over k in these blocks, in sequence, and
/// every path (blocked, few rows, prepacked) cuts k the same way, so their results agree bit for bit.
/// Balanced blocks spare the shallow last block and a pass over C: k = 576 runs as 2 x 288 instead
/// of 256 + 256 + 64 (the step's products against MKL in one process, one thread: 0.86 -> 0.89 of
/// its speed, RESULTS.md, 33rd session). At most 288 deep, a B block of 480 or 512 columns stays
/// within a 1 MiB L2 (576 KiB); an even maximum keeps every block within max_kc_block.
inline constexpr Index max_kc_block = 288;
[[nodiscard]] constexpr Index kc_block_of(Index k) {
  const Index blocks = std::max<Index>(1, (k + max_kc_block - 1) / max_kc_block);
  const Index depth = (k + blocks - 1) / blocks;
  return std::max<Index>(2, depth + (depth & 1));
}
static_assert(kc_block_of(576) == 288 && kc_block_of(512) == 256 && kc_block_of(1536) == 256 &&
              kc_block_of(577) == 194 && kc_block_of(289) == 146 && kc_block_of(1) == 2);

/// Makes a packing buffer hold at least `size` floats. The buffers only grow: the step's products
/// alternate shapes, and resizing a vector back up value-initializes its new tail (a memset of up
/// to a packed block per product, 0.8% of a two-thread step's samples). Packing writes every value
/// a kernel reads, padding included, so what a buffer held before does not matter.
inline float* packing_buffer(std::vector<float>& buffer, std::size_t size) {
  if (buffer.size() < size) buffer.resize(size);
  return buffer.data();
}

/// Cache blocking of the loops around one micro-kernel (see blocked_gemm). `mc` (a multiple of
/// the kernel's rows) is the row block of a task; `nc` the columns of B packed together;
/// `a_panel_in_l1` puts the rows loop outside the panels loop, so that a kernel call keeps its
/// A micro-panel in L1 and streams B panels from L2 (for tiles whose B panel, kc x NR, would fill
/// L1 itself); otherwise each B panel stays in L1 while A micro-panels stream past it.
struct Blocking {
  Index mc;
  Index nc;
  bool a_panel_in_l1;
};

#if VERL_HAS_X86_DISPATCH
template <Index width, Index out_stride>
VERL_TARGET_AVX2 inline void pack_transposed_avx2(const float* first, Index stride, Index kc, float* out);
#endif

/// Packs A[0:mc, 0:kc] into row panels of MR (k-major, zero-padded).
template <Index MR>
inline void pack_a(Operand<float> a, Index mc, Index kc, float* out) {
  for (Index i0 = 0; i0 < mc; i0 += MR) {
    const Index rows = std::min(MR, mc - i0);
#if VERL_HAS_X86_DISPATCH
    if constexpr (MR >= 8) {
      // A full panel of a row-major A is a transpose (only reached from the AVX paths).
      if (a.col_stride == 1 && rows == MR) {
        pack_transposed_avx2<MR, MR>(a.data + i0 * a.row_stride, a.row_stride, kc, out);
        out += kc * MR;
        continue;
      }
    }
#endif
    if (a.col_stride == 1) {
      for (Index k = 0; k < kc; ++k) {
        for (Index i = 0; i < rows; ++i) out[k * MR + i] = a.data[(i0 + i) * a.row_stride + k];
        for (Index i = rows; i < MR; ++i) out[k * MR + i] = 0.0f;
      }
    } else {
      for (Index k = 0; k < kc; ++k) {
        const float* column = a.data + k * a.col_stride + i0 * a.row_stride;
        for (Index i = 0; i < rows; ++i) out[k * MR + i] = column[i * a.row_stride];
        for (Index i = rows; i < MR; ++i) out[k * MR + i] = 0.0f;
      }
    }
    out += kc * MR;
  }
}

/// pack_a for a transposed A (A(i, k) = data[i + k * col_stride], e.g. dY^T in a weight
/// gradient): each k is one contiguous run of A's rows, read once for all panels of the block
/// (panel-by-panel, the block's kc distant rows would each be revisited mc / MR times).
template <Index MR>
inline void pack_a_transposed(Operand<float> a, Index mc, Index kc, float* out) {
  const Index panels = (mc + MR - 1) / MR;
  for (Index k = 0; k < kc; ++k) {
    const float* run = a.data + k * a.col_stride;
    for (Index p = 0; p < panels; ++p) {
      const Index i0 = p * MR, rows = std::min(MR, mc - i0);
      float* o = out + p * kc * MR + k * MR;
      if (rows == MR) {
        std::memcpy(o, run + i0, MR * sizeof(float));
      } else {
        for (Index i = 0; i < rows; ++i) o[i] = run[i0 + i];
        for (Index i = rows; i < MR; ++i) o[i] = 0.0f;
      }
    }
  }
}

#if VERL_HAS_X86_DISPATCH
/// out[k * out_stride + j] = first[j * stride + k] for j < 8 and k < 8: one 8 x 8 block
/// transposed in registers.
[[gnu::always_inline]] VERL_TARGET_AVX2 inline void transpose8x8_avx2(const float* first, Index stride, float* out,
                                                                    Index out_stride) {
  __m256 r[8];
  for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(first + j * stride);
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  _mm256_storeu_ps(out + 0 * out_stride, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(out + 1 * out_stride, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(out + 2 * out_stride, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(out + 3 * out_stride, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(out + 4 * out_stride, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(out + 5 * out_stride, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(out + 6 * out_stride, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(out + 7 * out_stride, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/// Packs `width` (>= 8) lines contiguous along k, `stride` apart (the columns of a transposed B,
/// or the rows of a row-major A), over kc: out[k * out_stride + j] = first[j * stride + k]. Eight
/// depths at a time for every group of 8 lines (a last partial group overlaps the one before it),
/// so that the output rows are written whole: line by line over all of kc, a 32-column panel
/// took 1.7x as long (576-float lines, from L2).
template <Index width, Index out_stride>
VERL_TARGET_AVX2 inline void pack_transposed_avx2(const float* first, Index stride, Index kc, float* out) {
  static_assert(width >= 8 && width <= out_stride, "pack_transposed_avx2 packs 8 or more lines into wider rows");
  Index k = 0;
  for (; k + 8 <= kc; k += 8) {
#pragma GCC unroll 8
    for (Index j = 0; j < width; j += 8) {
      const Index group = std::min(j, width - 8);
      transpose8x8_avx2(first + group * stride + k, stride, out + k * out_stride + group, out_stride);
    }
  }
  for (; k < kc; ++k) {
    for (Index j = 0; j < width; ++j) out[k * out_stride + j] = first[j * stride + k];
  }
}
#endif

/// Packs B[0:kc, 0:nc] into column panels of NR (k-major, zero-padded). A partial panel is zeroed
/// once, then filled: per-k padding or variable-size copies of a few floats compile to `rep stos`
/// / `rep movs`, whose start-up cost dominated the packing of narrow products in profiles.
template <Index NR>
inline void pack_b(Operand<float> b, Index kc, Index nc, float* out) {
  for (Index j0 = 0; j0 < nc; j0 += NR) {
    const Index cols = std::min(NR, nc - j0);
    if (cols < NR) std::memset(out, 0, static_cast<std::size_t>(kc * NR) * sizeof(float));
    if (b.col_stride == 1) {
      for (Index k = 0; k < kc; ++k) {
        const float* row = b.data + k * b.row_stride + j0;
        if (cols == NR) {
          std::memcpy(out + k * NR, row, NR * sizeof(float));  // constant size: a few vector moves
        } else {
          for (Index j = 0; j < cols; ++j) out[k * NR + j] = row[j];
        }
      }
    } else {
      Index j = 0;
#if VERL_HAS_X86_DISPATCH
      // Only reached from the AVX2 / AVX-512 products, so the AVX2 transpose is available.
      if (b.row_stride == 1) {
        if constexpr (NR >= 8) {
          if (cols == NR) {
            pack_transposed_avx2<NR, NR>(b.data + j0 * b.col_stride, b.col_stride, kc, out);
            j = cols;
          }
        }
        for (; j + 8 <= cols; j += 8) pack_transposed_avx2<8, NR>(b.data + (j0 + j) * b.col_stride, b.col_stride, kc, out + j);
      }
#endif
      for (; j < cols; ++j) {
        const float* column = b.data + (j0 + j) * b.col_stride;
        for (Index k = 0; k < kc; ++k) out[k * NR + j] = column[k * b.row_stride];
      }
    }
    out += kc * NR;
  }
}

/// Operand bytes a kernel call prefetches into L2 while it multiplies: the block that is packed
/// next, as `runs` runs of `run_bytes` bytes, `stride` bytes apart (rows of a row-major block, or
/// columns of a transposed one). One thread packing cold operands between its kernel calls reads
/// memory latency-bound (5-7 GB/s, a quarter of this core's bandwidth; 7-9% of a training step's
/// products); behind the multiply-adds of the call before, the packing reads L2.
struct PrefetchRuns {
  const char* run = nullptr;
  Index stride = 0;
  Index run_bytes = 0;
  Index runs = 0;

  /// The bytes of rows x cols of `block` (rows at most `rows`): its rows when they are contiguous,
  /// else its columns when they are; nothing for any other strides.
  static PrefetchRuns of(Operand<float> block, Index rows, Index cols) {
    const auto* first = reinterpret_cast<const char*>(block.data);
    if (block.col_stride == 1) {
      return {first, block.row_stride * Index{sizeof(float)}, cols * Index{sizeof(float)}, rows};
    }
    if (block.row_stride == 1) {
      return {first, block.col_stride * Index{sizeof(float)}, rows * Index{sizeof(float)}, cols};
    }
    return {};
  }
};

/// Walks a PrefetchRuns one cache line per step (a kernel takes a few steps per depth). Addresses
/// are integers: the first line of a run may start before the operand, and a prefetch never faults.
class PrefetchCursor {
 public:
  explicit PrefetchCursor(const PrefetchRuns& runs)
      : run_(reinterpret_cast<std::uintptr_t>(runs.run)),
        stride_(static_cast<std::uintptr_t>(runs.stride)),
        run_bytes_(static_cast<std::uintptr_t>(runs.run_bytes)),
        runs_left_(runs.runs) {
    start_run();
  }
  [[gnu::always_inline]] void step() {
    if (runs_left_ <= 0) return;
    __builtin_prefetch(reinterpret_cast<const void*>(line_), 0, 2);  // prefetcht1: L2, L1 stays the kernel's
    line_ += line_bytes;
    if (line_ >= run_end_) {
      run_ += stride_;
      --runs_left_;
      start_run();
    }
  }

 private:
  static constexpr std::uintptr_t line_bytes = 64;
  void start_run() {
    line_ = run_ - run_ % line_bytes;
    run_end_ = run_ + run_bytes_;
  }
  std::uintptr_t run_;
  std::uintptr_t stride_;
  std::uintptr_t run_bytes_;
  Index runs_left_;
  std::uintptr_t line_ = 0;
  std::uintptr_t run_end_ = 0;
};

/// Stands in for PrefetchCursor in kernels whose blocking never passes a next block.
struct NoPrefetchCursor {
  explicit NoPrefetchCursor(const PrefetchRuns&) {}
};

/// Adds (or writes) an MR x NR tile computed into `tile` to the valid mr x nr corner of C.
template <Index NR>
inline void store_partial(const float* tile, float* c, Index ldc, Index mr, Index nr, bool accumulate) {
  for (Index i = 0; i < mr; ++i) {
    for (Index j = 0; j < nr; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + tile[i * NR + j] : tile[i * NR + j];
  }
}

#if VERL_HAS_X86_DISPATCH

/// How many k ahead kernel_avx512 prefetches its B panel when the panel streams from L2.
inline constexpr Index kernel_b_prefetch_k = 4;
/// ... and when prepacked weights stream from memory (a decode step of more than 8 rows): 64 k
/// (4 KiB of a 16-column panel, running into the next panel) covers a DRAM miss; the hardware
/// prefetcher alone left the 8 x 16 tile at 72% of the FMA peak on SmolLM2's decode products
/// at batch 32 (an AMD EPYC core), 82% with it.
inline constexpr Index kernel_b_memory_prefetch_k = 64;

/// MR x (16 * NV) tile: MR * NV zmm accumulators, NV B loads and MR A broadcasts per k. Eight
/// rows (16 accumulators) kept only about 60% of the FMA ports busy even from L1 (the broadcasts
/// and loads outnumber the multiply-adds' issue slots); 14 x 32 (28) and 8 x 48 (24) reach the
/// ports' peak.
/// `b_prefetch_k` > 0: the B panel streams from L2 (Blocking::a_panel_in_l1) or from memory
/// (prepacked weights), so prefetch it that many k ahead into L1. `prefetches_next`: the blocking
/// packs between kernel calls (Blocking::a_panel_in_l1) and may pass a block to prefetch; the
/// others always pass none, and their loop skips the cursor.
template <int NV, Index MR, Index b_prefetch_k, bool prefetches_next = false>
VERL_TARGET_AVX512 inline void kernel_avx512(Index kc, const float* a, const float* b, float* c, Index ldc,
                                             bool accumulate, Index mr, Index nr, PrefetchRuns next) {
  constexpr Index NR = 16 * NV;
  // The C tile is read (or written) only after the k loop; fetching it now hides a miss per row.
  for (Index i = 0; i < std::min(mr, MR); ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    // The last value of each vector: a row of NV vectors spans up to NV + 1 lines.
    if constexpr (NV > 1) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16 * v + 15), _MM_HINT_T0);
    }
  }
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (Index i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  // Kernels that are never passed a next block build no cursor.
  [[maybe_unused]] std::conditional_t<prefetches_next, PrefetchCursor, NoPrefetchCursor> next_lines(next);
  for (Index k = 0; k < kc; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
    if constexpr (b_prefetch_k > 0) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        _mm_prefetch(reinterpret_cast<const char*>(b + b_prefetch_k * NR + 16 * v), _MM_HINT_T0);
      }
    }
    // Up to NV + 1 lines of the next block per depth: a row of an NV-vector panel spans that many.
    if constexpr (prefetches_next) {
#pragma GCC unroll 4
      for (int line = 0; line <= NV; ++line) next_lines.step();
    }
#pragma GCC unroll 16
    for (Index i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
    }
    a += MR;
    b += NR;
  }
  if (mr == MR && nr == NR) {
#pragma GCC unroll 16
    for (Index i = 0; i < MR; ++i) {
      float* row = c + i * ldc;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        if (accumulate) acc[i][v] = _mm512_add_ps(acc[i][v], _mm512_loadu_ps(row + 16 * v));
        _mm512_storeu_ps(row + 16 * v, acc[i][v]);
      }
    }
    return;
  }
  alignas(64) float tile[MR * NR];
  for (Index i = 0; i < MR; ++i) {
    for (int v = 0; v < NV; ++v) _mm512_store_ps(tile + i * NR + 16 * v, acc[i][v]);
  }
  store_partial<NR>(tile, c, ldc, mr, nr, accumulate);
}

/// 6 x 16 tile: 12 ymm accumulators. Only the 16-column blocking runs it, which packs nothing
/// between kernel calls: there is never a next block to prefetch.
VERL_TARGET_AVX2 inline void kernel_avx2(Index kc, const float* a, const float* b, float* c, Index ldc, bool accumulate,
                                         Index mr, Index nr, PrefetchRuns /*next*/) {
  constexpr Index MR = 6, NR = 16;
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (Index i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (Index k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (Index i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += MR;
    b += NR;
  }
  if (mr == MR && nr == NR) {
#pragma GCC unroll 6
    for (Index i = 0; i < MR; ++i) {
      float* row = c + i * ldc;
      if (accumulate) {
        acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_loadu_ps(row));
        acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_loadu_ps(row + 8));
      }
      _mm256_storeu_ps(row, acc[i][0]);
      _mm256_storeu_ps(row + 8, acc[i][1]);
    }
    return;
  }
  alignas(32) float tile[MR * NR];
  for (Index i = 0; i < MR; ++i) {
    _mm256_store_ps(tile + i * NR, acc[i][0]);
    _mm256_store_ps(tile + i * NR + 8, acc[i][1]);
  }
  store_partial<NR>(tile, c, ldc, mr, nr, accumulate);
}

/// B already packed in the kernels' layout: for each KC block starting at row pc, every NR-column
/// panel, kc x NR k-major; blocks are padded_cols * kc apart. `first_panel` offsets a column range.
struct PackedPanels {
  const float* data = nullptr;
  Index padded_cols = 0;
  Index first_panel = 0;
  Index nr = 0;
  const std::uint16_t* bf16 = nullptr;  ///< the same layout in bfloat16 (then `data` is null)
  /// Non-zero: `bf16` holds AMX tile panels instead (see PackedMatrix): each panel is the whole
  /// depth, padded to this multiple of 32, as rows of 16 columns x 2 consecutive k.
  Index tile_depth = 0;
  [[nodiscard]] const float* panel(Index pc, Index kc, Index p) const {
    return data + pc * padded_cols + (first_panel + p) * kc * nr;
  }
  /// Rows of a bfloat16 panel of depth kc: they hold pairs of k (see PackedMatrix::fill_bf16), the
  /// last one padded with zeros when kc is odd.
  [[nodiscard]] static constexpr Index bf16_panel_depth(Index kc) { return kc + (kc & 1); }
  /// panel() of the float32 (W = float) or bfloat16 (W = std::uint16_t) values.
  template <class W>
  [[nodiscard]] const W* panel_of(Index pc, Index kc, Index p) const {
    if constexpr (std::same_as<W, float>) {
      return panel(pc, kc, p);
    } else {
      return bf16 + pc * padded_cols + (first_panel + p) * bf16_panel_depth(kc) * nr;
    }
  }
};

/// Columns of C per task when a product has too few row blocks to occupy the pool (each task
/// packs its own copy of A), and when B is prepacked (a task packs nothing).
inline constexpr Index min_columns_per_task = 128;
/// Column stripes per thread's range in a multi-thread product, at least (ColumnClaims): what is
/// left when a thread finishes its own range is then shared out in pieces of an eighth or less
/// (the step's products at two threads on the Intel host: 4 per range 1.015x, 8 1.09x, 16 as 8).
inline constexpr Index min_stripes_per_range = 8;
inline constexpr Index min_prepacked_columns_per_task = 64;
/// Row blocks whose packed A (rows x kc) is kept and reused by every NC block of B's columns when
/// there are several (2.3 MiB at 196-row blocks and kc = 256: a share of L3).
inline constexpr Index row_blocks_per_chunk = 12;
/// C blocks larger than this (bytes; about an L2) are kept in cache across k blocks, when A packed
/// for every k block at once stays under a_all_k_max_bytes (see blocked_gemm).
inline constexpr std::size_t c_resident_min_bytes = std::size_t{1} << 20;
inline constexpr std::size_t a_all_k_max_bytes = std::size_t{8} << 20;

/// How blocked_gemm cuts a block of C (rows x nc) into tasks: row ranges of whole micro-panels,
/// and column groups.
struct TaskSplit {
  Index row_tasks;
  Index column_groups;
};

/// One thread: one task per row block of at most `mc` rows (its packed A stays in cache), no
/// column groups (each would pack the same A again). A pool: rows cut finer, into about four
/// tasks per thread (claimed as threads free up, so that the last ones even the load out); the
/// columns are split only when the rows alone give fewer than two tasks per thread. B streaming
/// from memory (prepacked weights) keeps whole row blocks and splits columns, so that each thread
/// reads its own share of the weights instead of every thread reading all of them.
inline TaskSplit split_tasks(Index rows, Index nc, Index threads, bool b_streams_from_memory, Index mr, Index mc) {
  const Index row_blocks = (rows + mc - 1) / mc;
  if (threads <= 1) return {row_blocks, 1};
  const Index wanted = 4 * threads, row_panels = (rows + mr - 1) / mr;
  const Index row_tasks = b_streams_from_memory ? row_blocks : std::clamp(wanted, row_blocks, row_panels);
  if (row_tasks >= 2 * threads) return {row_tasks, 1};
  return {row_tasks, std::clamp<Index>((wanted + row_tasks - 1) / row_tasks, 1, std::max<Index>(1, nc / min_columns_per_task))};
}

/// The columns of C that a one-thread product computes in its first and last row panels (each a
/// multiple of the tile's NR): the columns before `first_row_begin` and from `last_row_end` on
/// belong to the threads that hold the ranges before and after (see blocked_gemm).
struct EdgeColumns {
  Index first_row_begin = 0;
  Index last_row_end = std::numeric_limits<Index>::max();
};

/// The units of one thread's range of rows in a multi-thread product (see blocked_gemm): stripes
/// of `stripe_columns` columns of C (a multiple of the tile's NR) in each chunk of rows, numbered
/// chunk-major. The range's owner claims them in order, and a thread that has finished its own
/// range claims what is left, so a core that the host slows does less of the product instead of
/// holding the other at the join. Whoever claims a unit computes all of it (every k block, in
/// sequence), so the bits do not depend on who does.
struct ColumnClaims {
  Index stripe_columns = 0;
  std::atomic<Index> next{0};
};

/// Runs fn(0) .. fn(count - 1), on the pool when there is one.
template <class Fn>
void for_each_task(ThreadPool* pool, Index count, Fn&& fn) {
  if (pool != nullptr) {
    pool->parallel_for(count, fn);
  } else {
    for (Index t = 0; t < count; ++t) fn(t);
  }
}

/// The blocked loops around a micro-kernel (BLIS's five loops). Rows go in chunks; for each k
/// block of a chunk, A is packed once (when B has several NC blocks, for all of them); for each
/// NC block, B is packed once (panels split over the pool) and shared; tasks then take (MC rows x
/// a group of columns) blocks. Every element of C is summed in the same order (k blocks in
/// sequence, k within a block in sequence) whatever the split, so results do not depend on the
/// number of threads, on the blocking or on the other rows of the product.
template <Index MR, Index NR, Blocking blocking, class Kernel>
inline void blocked_gemm(ThreadPool* pool, Index m, Index n, Index k, Operand<float> a, Operand<float> b, float* c,
                         Index ldc, bool accumulate, Kernel kernel, const PackedPanels* prepacked = nullptr,
                         EdgeColumns edges = {}, ColumnClaims* claims = nullptr) {
  static_assert(blocking.mc % MR == 0, "Blocking::mc must be a multiple of the micro-kernel's rows");
  static_assert(blocking.nc % NR == 0,
                "Blocking::nc must be a multiple of the micro-kernel's columns (a block's last panel would overrun the packing buffer)");
  constexpr Index mc_block = blocking.mc, nc_block = blocking.nc;
  const Index kc_block = kc_block_of(k);
  const Index threads = pool != nullptr ? pool->size() : 1;
  // Prepacked weights (a decode step) pack nothing per task, so their column ranges may be
  // narrower: the k and v projections of a small model (192 columns) then use every thread.
  const Index columns_per_task = prepacked != nullptr ? min_prepacked_columns_per_task : min_columns_per_task;
  // Half a row block or more per thread: one range of tiles per thread (below). From 192 to 383
  // rows at two threads (the k/v projections' weight gradients, 192 x 576 x 512) ranges of rows
  // ran 1.09-1.14x as fast as columns of B or shared row tasks (RESULTS.md, 32nd session).
  const bool row_ranges = blocking.a_panel_in_l1 && pool != nullptr && threads > 1 && prepacked == nullptr &&
                          m >= threads * (mc_block / 2);
  if (!row_ranges && pool != nullptr && m <= mc_block && n >= 2 * columns_per_task) {
    // Few rows (a decode step): independent column ranges, one parallel region in all, each task
    // packing only its own columns of B, the panels spread evenly. Prepacked weights stream from
    // memory: one range per thread, so that each thread's stream (and the kernel's prefetch 64 k
    // ahead) runs through one long stretch of panels (decode products at batch 8-48 on two threads
    // 7-10% faster than with four shorter ranges per thread). So does a product whose A has more
    // than half a row block: every range packs all of A again, and at the k and v projections'
    // weight gradients of a training step (192 x 576 x 512, here from three threads on) four
    // ranges per thread spent more on that than they gained in balance (measured at two threads
    // before those took the ranges below: best 65% -> 77% of the peak). Otherwise up to four per
    // thread, a multiple of the threads where there are enough columns.
    const Index panels = (n + NR - 1) / NR;
    const Index ranges_per_thread = prepacked != nullptr || m > mc_block / 2 ? 1 : 4;
    Index groups = std::min<Index>({ranges_per_thread * threads, n / columns_per_task, panels});
    if (groups >= threads) groups -= groups % threads;
    pool->parallel_for(groups, [&](Index g) {
      const Index p0 = g * panels / groups, p1 = (g + 1) * panels / groups;
      const Index j0 = p0 * NR, cols = std::min(n, p1 * NR) - j0;
      PackedPanels sub;
      if (prepacked != nullptr) {
        sub = *prepacked;
        sub.first_panel += p0;
      }
      blocked_gemm<MR, NR, blocking>(nullptr, m, cols, k, a, {b.data + j0 * b.col_stride, b.row_stride, b.col_stride},
                                     c + j0, ldc, accumulate, kernel, prepacked != nullptr ? &sub : nullptr);
    });
    return;
  }
  if constexpr (blocking.a_panel_in_l1) {
    if (row_ranges) {
      // Half a row block or more per thread: one range of tiles per thread, each range a product of its
      // own on the one-thread path (packing as it goes, its own copy of B), with no barrier inside
      // the product. The training step's products at two threads: 64-81% of the peak with four
      // row tasks per thread behind shared packing regions (~290 regions a layer), 85% this way.
      // Under half a row block per thread, the copies of B would cost too much: those products
      // keep the tasks (or the column ranges above). The ranges cut the tiles in row order, a row
      // panel at a range's end split by columns: ranges of whole row panels left one thread a
      // panel more (512 rows = 37 panels of 14: 18 and 19; 82-84%).
      // Each range's columns are claimed in stripes (ColumnClaims): a thread done with its own
      // range takes the stripes its neighbours have not begun. On a host that slows one core at a
      // time the faster thread had waited 7-18% of each pass at the joins (RESULTS.md).
      const Index row_panels = (m + MR - 1) / MR, column_panels = (n + NR - 1) / NR;
      const Index tiles = row_panels * column_panels;
      const Index stripe_panels = std::clamp<Index>(column_panels / min_stripes_per_range, 1, nc_block / NR);
      std::vector<ColumnClaims> claims_of_range(static_cast<std::size_t>(threads));
      for (auto& range_claims : claims_of_range) range_claims.stripe_columns = stripe_panels * NR;
      // Stripes keep A packed for every k block: past that size, each range keeps to its owner.
      const bool shares_ranges = static_cast<double>(mc_block) * static_cast<double>(k) * sizeof(float) <=
                                 static_cast<double>(a_all_k_max_bytes);
      pool->parallel_for(threads, [&](Index t) {
        for (Index step = 0; step < (shares_ranges ? threads : 1); ++step) {
          const Index range = (t + step) % threads;
          const Index first_tile = range * tiles / threads, end_tile = (range + 1) * tiles / threads;
          if (first_tile >= end_tile) continue;
          const Index first = first_tile / column_panels, last = (end_tile - 1) / column_panels + 1;
          const Index i0 = first * MR, rows = std::min(m, last * MR) - i0;
          const EdgeColumns range_edges{(first_tile % column_panels) * NR, ((end_tile - 1) % column_panels + 1) * NR};
          blocked_gemm<MR, NR, blocking>(nullptr, rows, n, k, {a.data + i0 * a.row_stride, a.row_stride, a.col_stride},
                                         b, c + i0 * ldc, ldc, accumulate, kernel, nullptr, range_edges,
                                         shares_ranges ? &claims_of_range[static_cast<std::size_t>(range)] : nullptr);
        }
      });
      return;
    }
  }
  const Index kc_max = std::min(kc_block, k);
  thread_local std::vector<float> packed_b;
  if (prepacked == nullptr) {
    const Index nc_max = std::min(nc_block, (n + NR - 1) / NR * NR);
    packing_buffer(packed_b, static_cast<std::size_t>(nc_max * kc_max));
  }
  float* shared_b = packed_b.data();
  // One thread with a tile loop that keeps A micro-panels in L1 packs both operands piece by
  // piece just before their first use, each piece's source prefetched by the kernel call before
  // (see PrefetchRuns): one thread's packing then overlaps the multiply-adds.
  const bool packs_lazily = blocking.a_panel_in_l1 && threads == 1 && prepacked == nullptr;
  // Column stripes claimed from a range shared with other threads (ColumnClaims): every unit is
  // all of k for its columns, so the C blocks stay resident (below) and A, packed for every k
  // block in the caller's first unit of a chunk, is reused by its later ones. Chunks shrink so
  // that A for every k block stays within a_all_k_max_bytes.
  const bool stripes = claims != nullptr;
  const Index stripe_columns = stripes ? claims->stripe_columns : nc_block;
  // With one NC block, each task packs its own rows of A where it uses them.
  const bool share_a = n > nc_block || stripes;
  const Index a_fit_rows = static_cast<Index>(a_all_k_max_bytes / sizeof(float)) / std::max<Index>(k, 1) / mc_block * mc_block;
  const Index chunk_rows = !share_a ? m
                           : stripes ? std::clamp(a_fit_rows, mc_block, row_blocks_per_chunk * mc_block)
                                     : row_blocks_per_chunk * mc_block;
  thread_local std::vector<float> packed_a_chunk;
  if (share_a) packing_buffer(packed_a_chunk, static_cast<std::size_t>((std::min(chunk_rows, m) + MR - 1) / MR * MR * kc_max));

  // A chunk whose C block outgrows the caches while A (packed for every k block at once) stays
  // small runs the NC blocks outside the k blocks: each C block (rows x NC) then stays in cache
  // across its k blocks instead of C being swept from memory once per k block (the LM head's
  // logits: 341 x 49152 floats, three times over k = 576). Per element the k blocks still come in
  // sequence, so the results are the same bits in either order.
  const Index k_blocks = (k + kc_block - 1) / kc_block;
  const bool c_outgrows_cache = static_cast<double>(std::min(chunk_rows, m)) * static_cast<double>(n) * sizeof(float) >
                                static_cast<double>(c_resident_min_bytes);
  const bool a_fits_for_every_k = static_cast<double>(std::min(chunk_rows, m)) * static_cast<double>(k) * sizeof(float) <=
                                  static_cast<double>(a_all_k_max_bytes);
  const bool c_resident = stripes || (share_a && k_blocks > 1 && c_outgrows_cache && a_fits_for_every_k);
  // Packed A of one k block per row block (share_a), or of every k block (c_resident): block b of
  // k block q at shared_a + q * a_k_stride + b * mc_block * kc.
  const Index padded_chunk_rows = (std::min(chunk_rows, m) + mc_block - 1) / mc_block * mc_block;
  const Index a_k_stride = c_resident ? padded_chunk_rows * kc_max : 0;
  if (c_resident) packing_buffer(packed_a_chunk, static_cast<std::size_t>(a_k_stride * k_blocks));
  float* shared_a = packed_a_chunk.data();

  const Index stripes_per_chunk = (n + stripe_columns - 1) / stripe_columns;
  const Index units = (m + chunk_rows - 1) / chunk_rows * stripes_per_chunk;
  auto claim_unit = [&] { return claims->next.fetch_add(1, std::memory_order_relaxed); };
  Index unit = stripes ? claim_unit() : 0;
  for (Index i0 = 0; i0 < m; i0 += chunk_rows) {
    if (stripes && unit >= units) break;
    // Claims only grow, so the chunks before the next claimed unit's are others' work.
    if (stripes && unit / stripes_per_chunk != i0 / chunk_rows) continue;
    const Index rows = std::min(chunk_rows, m - i0);
    // The caller's first column block of this chunk packs A (packs_lazily).
    const Index first_jc = stripes ? unit % stripes_per_chunk * stripe_columns : 0;
    const Index row_blocks = (rows + mc_block - 1) / mc_block;
    // Packs rows [ic, ic + mc) of A's k block at pc.
    auto pack_a_rows = [&](Index pc, Index ic, Index mc, float* out) {
      const Index kc = std::min(kc_block, k - pc);
      const Operand<float> a_block{a.data + ic * a.row_stride + pc * a.col_stride, a.row_stride, a.col_stride};
      if (a.row_stride == 1 && a.col_stride != 1) {
        pack_a_transposed<MR>(a_block, mc, kc, out);
      } else {
        pack_a<MR>(a_block, mc, kc, out);
      }
    };
    auto pack_a_block = [&](Index pc, Index block, float* out) {
      const Index ic = i0 + block * mc_block;
      pack_a_rows(pc, ic, std::min(mc_block, i0 + rows - ic), out);
    };
    auto shared_a_of = [&](Index pc) { return shared_a + (pc / kc_block) * a_k_stride; };
    auto pack_shared_a = [&](Index pc) {
      const Index kc = std::min(kc_block, k - pc);
      for_each_task(pool, row_blocks, [&](Index block) { pack_a_block(pc, block, shared_a_of(pc) + block * mc_block * kc); });
    };
    // C[rows, jc : jc + NC] (+)= A[rows, pc : pc + KC] B[pc : pc + KC, jc : jc + NC].
    auto multiply_block = [&](Index pc, Index jc) {
      const Index kc = std::min(kc_block, k - pc);
      const bool add = accumulate || pc > 0;
      const Index nc = std::min(stripe_columns, n - jc);
      const Index panels = (nc + NR - 1) / NR;
      const TaskSplit split = split_tasks(rows, nc, threads, prepacked != nullptr, MR, mc_block);
      const Index panels_per_group = (panels + split.column_groups - 1) / split.column_groups;
      const Index column_groups = (panels + panels_per_group - 1) / panels_per_group;
      const Index row_tasks = split.row_tasks;
      const Index row_panels = (rows + MR - 1) / MR;
      const Operand<float> b_slab{b.data + pc * b.row_stride + jc * b.col_stride, b.row_stride, b.col_stride};
      auto b_columns = [&](Index p0) -> Operand<float> {
        return {b_slab.data + p0 * NR * b.col_stride, b.row_stride, b.col_stride};
      };
      auto columns_of_panels = [&](Index p0, Index p1) { return std::min(nc, p1 * NR) - p0 * NR; };
      // B is packed in its own groups (every thread takes a share even when the tasks below split
      // only rows), unless one thread packs it panel by panel in its first row panel's loop.
      const Index pack_groups = std::min<Index>(panels, threads > 1 ? 2 * threads : 1);
      const Index panels_per_pack = (panels + pack_groups - 1) / pack_groups;
      auto pack_panels = [&](Index p0, Index p1) {
        if (p0 < p1) pack_b<NR>(b_columns(p0), kc, columns_of_panels(p0, p1), shared_b + p0 * kc * NR);
      };
      // A packed where it is used: the task's own rows, or the shared block in its first NC block.
      const bool tasks_pack_a = !share_a || (packs_lazily && jc == first_jc);
      auto compute = [&](Index task) {
        const Index row_task = task / column_groups, group = task % column_groups;
        // Whole MR-row panels, spread evenly over the row tasks.
        const Index first = row_task * row_panels / row_tasks, last = (row_task + 1) * row_panels / row_tasks;
        const Index ic = i0 + first * MR, mc = std::min(rows, last * MR) - first * MR;
        float* a_packed = shared_a_of(pc) + first * MR * kc;
        if (!share_a) {
          thread_local std::vector<float> packed_a;
          a_packed = packing_buffer(packed_a, static_cast<std::size_t>((mc + MR - 1) / MR * MR * kc));
        }
        const Index p0 = group * panels_per_group, p1 = std::min(panels, p0 + panels_per_group);
        auto tile = [&](Index ir, Index p, const PrefetchRuns& next) {
          const Index jr = p * NR;
          const float* b_panel =
              prepacked != nullptr ? prepacked->panel(pc, kc, jc / NR + p) : shared_b + p * kc * NR;
          kernel(kc, a_packed + (ir / MR) * kc * MR, b_panel, c + (ic + ir) * ldc + jc + jr, ldc, add,
                 std::min(MR, mc - ir), std::min(NR, nc - jr), next);
        };
        auto a_rows = [&](Index ir) { return std::min(MR, mc - ir); };
        if constexpr (blocking.a_panel_in_l1) {
          // Each A micro-panel is packed just before its row of tiles, and (one thread) each B panel
          // just before the first tile that reads it; the tile before prefetches what is packed next.
          const bool packs_b = packs_lazily && row_task == 0;
          auto a_source = [&](Index ir) {
            return PrefetchRuns::of({a.data + (ic + ir) * a.row_stride + pc * a.col_stride, a.row_stride, a.col_stride},
                                    a_rows(ir), kc);
          };
          // This block's panels in row ir: all of [p0, p1) but in the product's first and last row
          // panels, which other threads share (EdgeColumns).
          const Index block_panel = jc / NR;
          auto row_begin = [&](Index ir) {
            return ic + ir == 0 ? std::clamp(edges.first_row_begin / NR - block_panel, p0, p1) : p0;
          };
          auto row_end = [&](Index ir) {
            if (ic + ir + MR < m) return p1;
            const Index end = edges.last_row_end / NR - block_panel;
            return std::clamp(end, row_begin(ir), p1);
          };
          // Panels left of the first row's begin are first read (and packed) in the second row; a
          // task of one row packs them ahead for the tasks after it.
          const Index first_row_begin = row_begin(0);
          if (packs_b && mc <= MR) pack_panels(p0, first_row_begin);
          auto packs_at = [&](Index ir, Index p) { return packs_b && ir == (p < first_row_begin ? MR : 0); };
          for (Index ir = 0; ir < mc; ir += MR) {
            if (tasks_pack_a) pack_a_rows(pc, ic + ir, a_rows(ir), a_packed + (ir / MR) * kc * MR);
            const Index begin = row_begin(ir), end = row_end(ir);
            for (Index p = begin; p < end; ++p) {
              if (packs_at(ir, p)) pack_panels(p, p + 1);
              PrefetchRuns next;
              if (p + 1 < end && packs_at(ir, p + 1)) {
                next = PrefetchRuns::of(b_columns(p + 1), kc, columns_of_panels(p + 1, p + 2));
              } else if (tasks_pack_a && p + 1 == end && ir + MR < mc) {
                next = a_source(ir + MR);
              }
              tile(ir, p, next);
            }
          }
        } else {
          if (tasks_pack_a) pack_a_rows(pc, ic, mc, a_packed);
          for (Index p = p0; p < p1; ++p) {
            for (Index ir = 0; ir < mc; ir += MR) tile(ir, p, {});
          }
        }
      };
      if (prepacked == nullptr && !packs_lazily) {
        for_each_task(pool, pack_groups, [&](Index group) {
          const Index p0 = group * panels_per_pack;
          pack_panels(p0, std::min(panels, p0 + panels_per_pack));
        });
      }
      for_each_task(packs_lazily ? nullptr : pool, row_tasks * column_groups, compute);
    };
    if (c_resident) {
      if (!packs_lazily) {
        for (Index pc = 0; pc < k; pc += kc_block) pack_shared_a(pc);
      }
      if (stripes) {
        for (; unit < units && unit / stripes_per_chunk == i0 / chunk_rows; unit = claim_unit()) {
          for (Index pc = 0; pc < k; pc += kc_block) multiply_block(pc, unit % stripes_per_chunk * stripe_columns);
        }
      } else {
        for (Index jc = 0; jc < n; jc += nc_block) {
          for (Index pc = 0; pc < k; pc += kc_block) multiply_block(pc, jc);
        }
      }
    } else {
      for (Index pc = 0; pc < k; pc += kc_block) {
        if (share_a && !packs_lazily) pack_shared_a(pc);
        for (Index jc = 0; jc < n; jc += nc_block) multiply_block(pc, jc);
      }
    }
  }
}

/// R rows of A (rows `a_row_stride` apart) times one 16-column panel of B over kc depths: R
/// independent chains of multiply-adds interleaved, so that the FMA latency of one row hides
/// behind the others (one row alone waits four cycles per depth). B's rows are read masked to
/// `lanes`, in place or from a packed panel.
template <Index R>
[[gnu::always_inline]] VERL_TARGET_AVX512 inline void few_rows_panel(Index kc, const float* a, Index a_row_stride,
                                                                     Index a_col_stride, const float* rows_of_b,
                                                                     Index b_step, __mmask16 lanes, float* c, Index ldc,
                                                                     bool add) {
  __m512 acc[R];
#pragma GCC unroll 4
  for (Index i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  for (Index kk = 0; kk < kc; ++kk) {
    const __m512 b_k = _mm512_maskz_loadu_ps(lanes, rows_of_b + kk * b_step);
#pragma GCC unroll 4
    for (Index i = 0; i < R; ++i) {
      acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[i * a_row_stride + kk * a_col_stride]), b_k, acc[i]);
    }
  }
#pragma GCC unroll 4
  for (Index i = 0; i < R; ++i) {
    float* out = c + i * ldc;
    if (add) acc[i] = _mm512_add_ps(acc[i], _mm512_maskz_loadu_ps(lanes, out));
    _mm512_mask_storeu_ps(out, lanes, acc[i]);
  }
}

/// Products with fewer rows than a micro-tile and too little work for the pool (a decode step's
/// attention: the query heads that share a key/value head against the cached keys). The blocked
/// path would pad A to 8 rows and pack it, and its setup costs more than the product. Rows of B
/// that hold the columns contiguously are read in place, a partial panel through a mask (packing
/// it cost more than the product at a few dozen keys). Each element is the same chain of
/// multiply-adds as in kernel_avx512 (from zero over a KC block, then added to C), so the results
/// are bit-identical to the blocked path's.
VERL_TARGET_AVX512 inline void sgemm_avx512_few_rows(Index m, Index n, Index k, Operand<float> a, Operand<float> b,
                                                     float* c, Index ldc, bool accumulate) {
  constexpr Index NR = 16;
  const Index kc_block = kc_block_of(k);
  alignas(64) float panel[max_kc_block * NR];
  for (Index j0 = 0; j0 < n; j0 += NR) {
    const Index cols = std::min(NR, n - j0);
    const auto lanes = static_cast<__mmask16>((1u << cols) - 1u);
    for (Index pc = 0; pc < k; pc += kc_block) {
      const Index kc = std::min(kc_block, k - pc);
      const Operand<float> b_slab{b.data + pc * b.row_stride + j0 * b.col_stride, b.row_stride, b.col_stride};
      const bool in_place = b.col_stride == 1;
      if (!in_place) pack_b<NR>(b_slab, kc, cols, panel);
      const float* rows_of_b = in_place ? b_slab.data : panel;
      const Index step = in_place ? b.row_stride : NR;
      const bool add = accumulate || pc > 0;
      for (Index i0 = 0; i0 < m; i0 += 4) {
        const float* a_rows = a.data + i0 * a.row_stride + pc * a.col_stride;
        float* c_rows = c + i0 * ldc + j0;
        switch (std::min<Index>(4, m - i0)) {
          case 1: few_rows_panel<1>(kc, a_rows, a.row_stride, a.col_stride, rows_of_b, step, lanes, c_rows, ldc, add); break;
          case 2: few_rows_panel<2>(kc, a_rows, a.row_stride, a.col_stride, rows_of_b, step, lanes, c_rows, ldc, add); break;
          case 3: few_rows_panel<3>(kc, a_rows, a.row_stride, a.col_stride, rows_of_b, step, lanes, c_rows, ldc, add); break;
          default: few_rows_panel<4>(kc, a_rows, a.row_stride, a.col_stride, rows_of_b, step, lanes, c_rows, ldc, add); break;
        }
      }
    }
  }
}

/// How far ahead of its reads each stream of kernel_avx512_streams prefetches.
inline constexpr Index stream_prefetch_bytes = 2048;

/// float32 -> bfloat16 bits in the low half of each 32-bit lane (the high half zero): round to
/// nearest even, NaN kept quiet, as float_to_bf16_bits.
VERL_TARGET_AVX512 inline __m512i bf16_rounded_bits_avx512(__m512 values) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), infinity = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  // The maskz forms with every lane set: GCC 12's unmasked ones start from an "undefined" vector
  // that -Wmaybe-uninitialized reports.
  constexpr __mmask16 all = 0xffff;
  const __m512i bits = _mm512_castps_si512(values);
  const __m512i high = _mm512_maskz_srli_epi32(all, bits, 16);
  const __m512i rounded =
      _mm512_maskz_srli_epi32(all, _mm512_add_epi32(bits, _mm512_add_epi32(bias, _mm512_and_si512(high, one))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, magnitude), infinity);
  return _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(high, quiet));
}

/// float32 -> bfloat16 bits (float_to_bf16_bits, 16 at a time); `count` is a multiple of 16.
VERL_TARGET_AVX512 inline void round_to_bf16_avx512(const float* in, Index count, std::uint16_t* out) {
  constexpr __mmask16 all = 0xffff;  // maskz: see bf16_rounded_bits_avx512
  for (Index i = 0; i < count; i += 16) {
    const __m512i bits = bf16_rounded_bits_avx512(_mm512_loadu_ps(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_maskz_cvtepi32_epi16(all, bits));
  }
}

/// A (m x k) with every value rounded to bfloat16 and widened back, into `out` (rows k apart):
/// the rows a bfloat16 product multiplies, the same values as float_to_bf16_bits gives.
VERL_TARGET_AVX512 inline void round_rows_to_bf16_avx512(Operand<float> a, Index m, Index k, float* out) {
  constexpr __mmask16 all = 0xffff;  // maskz: see bf16_rounded_bits_avx512
  for (Index i = 0; i < m; ++i) {
    float* row = out + i * k;
    Index j = 0;
    if (a.col_stride == 1) {
      const float* in = a.data + i * a.row_stride;
      for (; j + 16 <= k; j += 16) {
        _mm512_storeu_ps(row + j, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
                                      all, bf16_rounded_bits_avx512(_mm512_loadu_ps(in + j)), 16)));
      }
    }
    for (; j < k; ++j) row[j] = bf16_bits_to_float(float_to_bf16_bits(a.at(i, j)));
  }
}

/// A float32 panel (kc rows of 16 columns) as the bfloat16 panel kernel_avx512_streams reads: rows
/// in pairs, lane j of pair r holding B(2r, j) in its low half and B(2r + 1, j) in its high half
/// (zero past an odd kc), each rounded as float_to_bf16_bits.
VERL_TARGET_AVX512 inline void pack_bf16_pairs_avx512(const float* panel, Index kc, std::uint16_t* out) {
  constexpr Index NR = 16;
  constexpr __mmask16 all = 0xffff;  // maskz: see bf16_rounded_bits_avx512
  for (Index k = 0; k < kc; k += 2) {
    const __m512i even = bf16_rounded_bits_avx512(_mm512_loadu_ps(panel + k * NR));
    const __m512i odd = k + 1 < kc ? bf16_rounded_bits_avx512(_mm512_loadu_ps(panel + (k + 1) * NR)) : _mm512_setzero_si512();
    _mm512_storeu_si512(out + k * NR, _mm512_or_si512(even, _mm512_maskz_slli_epi32(all, odd, 16)));
  }
}

/// acc[i][s] += a_k[i] * rows[s]: one depth of kernel_avx512_streams's 8 x 16 tiles.
template <int S>
[[gnu::always_inline]] VERL_TARGET_AVX512 inline void multiply_add_rows(__m512 (&acc)[8][S], const float* a_k,
                                                                        const __m512* rows) {
#pragma GCC unroll 8
  for (Index i = 0; i < 8; ++i) {
    const __m512 ai = _mm512_set1_ps(a_k[i]);
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) acc[i][s] = _mm512_fmadd_ps(ai, rows[s], acc[i][s]);
  }
}

/// 8 x 16 tiles of S panels at once, each from its own place in memory: a decode step (a few rows
/// against every weight) is bound by reading the weights, and one core reads about 1.5x faster
/// from three sequential streams than from one (the hardware prefetcher runs ahead in each).
/// Each element is the same chain of multiply-adds as in kernel_avx512 (from zero over a KC
/// block, then added to C), so float32 panels give the blocked path's results bit for bit.
///
/// bfloat16 panels hold k in pairs, (B(k, j), B(k + 1, j)) in the two halves of 32-bit lane j:
/// one 64-byte load widens to both rows with a shift and a mask, two ALU operations per 32 values
/// where a row at a time takes a widening move and a shift per 16 (the products of a decode step
/// leave the FMA ports little room for more).
template <int S, class W>
VERL_TARGET_AVX512 inline void kernel_avx512_streams(Index kc, const float* a, const W* const* b, float* const* c,
                                                     Index ldc, bool accumulate, Index mr, const Index* nr) {
  constexpr Index MR = 8, NR = 16;
  __m512 acc[MR][S];
#pragma GCC unroll 8
  for (Index i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) acc[i][s] = _mm512_setzero_ps();
  }
  const W* panel[S];
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) panel[s] = b[s];
  // Prefetching 2 KiB ahead in each stream, on top of the hardware's, measured 1.3x faster
  // again (a prefetch past the end of the panels does not fault).
  if constexpr (std::same_as<W, float>) {
    constexpr Index prefetch_rows = stream_prefetch_bytes / (NR * static_cast<Index>(sizeof(W)));
    for (Index k = 0; k < kc; ++k) {
      __m512 rows[S];
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) {
        rows[s] = _mm512_loadu_ps(panel[s] + k * NR);
        _mm_prefetch(reinterpret_cast<const char*>(panel[s] + (k + prefetch_rows) * NR), _MM_HINT_T0);
      }
      multiply_add_rows<S>(acc, a + k * MR, rows);
    }
  } else {
    static_assert(std::same_as<W, std::uint16_t>, "panels hold float32 or bfloat16 values");
    constexpr __mmask16 all = 0xffff;  // maskz: see bf16_rounded_bits_avx512
    const __m512i high_halves = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    constexpr Index prefetch_values = stream_prefetch_bytes / static_cast<Index>(sizeof(W));
    Index k = 0;
    for (; k + 2 <= kc; k += 2) {
      __m512i pairs[S];
      __m512 rows[S];
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) {
        pairs[s] = _mm512_loadu_si512(panel[s] + k * NR);
        _mm_prefetch(reinterpret_cast<const char*>(panel[s] + k * NR + prefetch_values), _MM_HINT_T0);
        rows[s] = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, pairs[s], 16));
      }
      multiply_add_rows<S>(acc, a + k * MR, rows);
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) rows[s] = _mm512_castsi512_ps(_mm512_and_si512(pairs[s], high_halves));
      multiply_add_rows<S>(acc, a + (k + 1) * MR, rows);
    }
    if (k < kc) {  // the last, unpaired row (its partner is padding, never multiplied)
      __m512 rows[S];
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) {
        rows[s] = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_loadu_si512(panel[s] + k * NR), 16));
      }
      multiply_add_rows<S>(acc, a + k * MR, rows);
    }
  }
  for (int s = 0; s < S; ++s) {
    const auto lanes = static_cast<__mmask16>((1u << nr[s]) - 1u);
    for (Index i = 0; i < mr; ++i) {
      float* out = c[s] + i * ldc;
      __m512 v = acc[i][s];
      if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(lanes, out));
      _mm512_mask_storeu_ps(out, lanes, v);
    }
  }
}

/// C (+)= A B against B prepacked in 16-column panels (float32 or bfloat16 values), columns
/// [0, n) of the panels starting at `panels.first_panel`. The panels are taken three at a time
/// from three thirds of the range (see kernel_avx512_streams); every 8-row block of A runs against
/// the three while they are in cache.
template <class W>
VERL_TARGET_AVX512 inline void sgemm_avx512_prepacked_rows(Index m, Index n, Index k, Operand<float> a,
                                                           const PackedPanels& panels, float* c, Index ldc,
                                                           bool accumulate) {
  constexpr Index MR = 8, NR = 16;
  const Index kc_block = kc_block_of(k);
  const Index row_blocks = (m + MR - 1) / MR;
  thread_local std::vector<float> packed_a;
  packing_buffer(packed_a, static_cast<std::size_t>(row_blocks * MR * std::min(kc_block, k)));
  const Index count = (n + NR - 1) / NR, third = (count + 2) / 3;
  for (Index pc = 0; pc < k; pc += kc_block) {
    const Index kc = std::min(kc_block, k - pc);
    const bool add = accumulate || pc > 0;
    pack_a<MR>({a.data + pc * a.col_stride, a.row_stride, a.col_stride}, m, kc, packed_a.data());
    for (Index t = 0; t < third; ++t) {
      // Panels t, t + third and t + 2 third (the last third may be short); every entry set, so
      // that the compiler sees no read of an unset one.
      const Index p[3] = {t, std::min(t + third, count - 1), std::min(t + 2 * third, count - 1)};
      const int streams = 1 + static_cast<int>(t + third < count) + static_cast<int>(t + 2 * third < count);
      const W* const b[3] = {panels.panel_of<W>(pc, kc, p[0]), panels.panel_of<W>(pc, kc, p[1]),
                             panels.panel_of<W>(pc, kc, p[2])};
      const Index widths[3] = {std::min(NR, n - p[0] * NR), std::min(NR, n - p[1] * NR), std::min(NR, n - p[2] * NR)};
      for (Index block = 0; block < row_blocks; ++block) {
        const Index i0 = block * MR;
        float* const out[3] = {c + i0 * ldc + p[0] * NR, c + i0 * ldc + p[1] * NR, c + i0 * ldc + p[2] * NR};
        const float* a_block = packed_a.data() + block * kc * MR;
        const Index rows = std::min(MR, m - i0);
        if (streams == 3) {
          kernel_avx512_streams<3, W>(kc, a_block, b, out, ldc, add, rows, widths);
        } else if (streams == 2) {
          kernel_avx512_streams<2, W>(kc, a_block, b, out, ldc, add, rows, widths);
        } else {
          kernel_avx512_streams<1, W>(kc, a_block, b, out, ldc, add, rows, widths);
        }
      }
    }
  }
}

#if VERL_HAS_AMX_DISPATCH
#define VERL_TARGET_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx2,fma")))

/// Whether this CPU has AMX bfloat16 tiles and Linux lets the process use them (asked once: the
/// tile state is enabled per process on request, ARCH_REQ_XCOMP_PERM for XTILEDATA).
inline bool amx_bf16_usable() {
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    constexpr unsigned amx_bf16_bit = 1u << 22, amx_tile_bit = 1u << 24;
    if ((edx & amx_bf16_bit) == 0 || (edx & amx_tile_bit) == 0 || !__builtin_cpu_supports("avx512bw")) return false;
    if (cpu::simd::best_level() != cpu::SimdLevel::avx512) return false;  // VERL_SIMD chose a narrower level
    constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
  }();
  return usable;
}

/// The 64-byte operand of LDTILECFG (palette 1).
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};

/// Panels whose C tiles a pass of amx_panels keeps in tile registers (tmm2..tmm7; tmm0 holds A
/// and tmm1 the panel being multiplied).
inline constexpr int amx_panels_per_pass = 6;
/// bfloat16 values of k per tile row (64 bytes), and tile rows of A and C.
inline constexpr Index amx_k_per_tile = 32, amx_rows_per_tile = 16;

/// C tiles of P panels (16 columns each, `panel_stride` values apart) for the rows of A loaded
/// per tile config, over `chunks` tiles of depth, stored to `out` (P x rows x 16 floats).
template <int P>
VERL_TARGET_AMX inline void amx_panels(Index chunks, const std::uint16_t* a, Index a_row_bytes,
                                       const std::uint16_t* panel0, Index panel_stride, float* out) {
  static_assert(P >= 1 && P <= amx_panels_per_pass);
  constexpr Index tile_values = amx_k_per_tile * 16;  // one B tile: 16 k-pairs x 16 columns x 2
  constexpr Index row_bytes = 64, c_bytes = 16 * sizeof(float) * amx_rows_per_tile;
  // Tile registers are immediates: one line per register.
  _tile_zero(2);
  if constexpr (P > 1) _tile_zero(3);
  if constexpr (P > 2) _tile_zero(4);
  if constexpr (P > 3) _tile_zero(5);
  if constexpr (P > 4) _tile_zero(6);
  if constexpr (P > 5) _tile_zero(7);
  for (Index q = 0; q < chunks; ++q) {
    _tile_loadd(0, a + q * amx_k_per_tile, a_row_bytes);
    const std::uint16_t* b = panel0 + q * tile_values;
    // The next tile of every panel: without it the tile loads wait on memory (measured 1.3x
    // slower); further ahead measured no better.
    for (int p = 0; p < P; ++p) {
      const char* ahead = reinterpret_cast<const char*>(b + p * panel_stride + tile_values);
      for (int line = 0; line < 16; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
    }
    _tile_loadd(1, b, row_bytes);
    _tile_dpbf16ps(2, 0, 1);
    if constexpr (P > 1) {
      _tile_loadd(1, b + panel_stride, row_bytes);
      _tile_dpbf16ps(3, 0, 1);
    }
    if constexpr (P > 2) {
      _tile_loadd(1, b + 2 * panel_stride, row_bytes);
      _tile_dpbf16ps(4, 0, 1);
    }
    if constexpr (P > 3) {
      _tile_loadd(1, b + 3 * panel_stride, row_bytes);
      _tile_dpbf16ps(5, 0, 1);
    }
    if constexpr (P > 4) {
      _tile_loadd(1, b + 4 * panel_stride, row_bytes);
      _tile_dpbf16ps(6, 0, 1);
    }
    if constexpr (P > 5) {
      _tile_loadd(1, b + 5 * panel_stride, row_bytes);
      _tile_dpbf16ps(7, 0, 1);
    }
  }
  constexpr Index out_row_bytes = 16 * sizeof(float);
  _tile_stored(2, out, out_row_bytes);
  if constexpr (P > 1) _tile_stored(3, out + c_bytes / sizeof(float), out_row_bytes);
  if constexpr (P > 2) _tile_stored(4, out + 2 * c_bytes / sizeof(float), out_row_bytes);
  if constexpr (P > 3) _tile_stored(5, out + 3 * c_bytes / sizeof(float), out_row_bytes);
  if constexpr (P > 4) _tile_stored(6, out + 4 * c_bytes / sizeof(float), out_row_bytes);
  if constexpr (P > 5) _tile_stored(7, out + 5 * c_bytes / sizeof(float), out_row_bytes);
}

/// C (+)= A B against AMX tile panels (PackedPanels::tile_depth), columns [0, n) of the panels
/// starting at `panels.first_panel`. A is rounded to bfloat16 (products of bfloat16 values summed
/// in float32 by the tiles). Six panels at a time are the outer loop so that they stay in L2 while
/// every 16-row block of A passes over them.
VERL_TARGET_AMX inline void sgemm_amx_prepacked(Index m, Index n, Index k, Operand<float> a, const PackedPanels& panels,
                                                float* c, Index ldc, bool accumulate) {
  constexpr Index R = amx_rows_per_tile;
  const Index depth = panels.tile_depth, rows = std::min(m, R), row_blocks = (m + R - 1) / R;
  thread_local std::vector<std::uint16_t> a_bf16;
  thread_local std::vector<float> a_row;
  a_bf16.assign(static_cast<std::size_t>(row_blocks * R * depth), 0);
  a_row.assign(static_cast<std::size_t>((k + 15) / 16 * 16), 0.0f);
  for (Index i = 0; i < m; ++i) {
    for (Index j = 0; j < k; ++j) a_row[static_cast<std::size_t>(j)] = a.at(i, j);
    round_to_bf16_avx512(a_row.data(), static_cast<Index>(a_row.size()), a_bf16.data() + i * depth);
  }
  TileConfig config;
  config.rows[0] = static_cast<std::uint8_t>(rows);
  config.bytes_per_row[0] = 64;
  config.rows[1] = static_cast<std::uint8_t>(amx_k_per_tile / 2);
  config.bytes_per_row[1] = 64;
  for (int t = 2; t < 8; ++t) {
    config.rows[t] = static_cast<std::uint8_t>(rows);
    config.bytes_per_row[t] = 64;
  }
  _tile_loadconfig(&config);
  alignas(64) float out[amx_panels_per_pass * R * 16];
  const Index count = (n + 15) / 16, chunks = depth / amx_k_per_tile, panel_stride = depth * 16;
  for (Index p0 = 0; p0 < count; p0 += amx_panels_per_pass) {
    const int passes = static_cast<int>(std::min<Index>(amx_panels_per_pass, count - p0));
    const std::uint16_t* panel0 = panels.bf16 + (panels.first_panel + p0) * panel_stride;
    for (Index block = 0; block < row_blocks; ++block) {
      const std::uint16_t* a_block = a_bf16.data() + block * R * depth;
      const Index a_row_bytes = depth * static_cast<Index>(sizeof(std::uint16_t));
      switch (passes) {
        case 6: amx_panels<6>(chunks, a_block, a_row_bytes, panel0, panel_stride, out); break;
        case 5: amx_panels<5>(chunks, a_block, a_row_bytes, panel0, panel_stride, out); break;
        case 4: amx_panels<4>(chunks, a_block, a_row_bytes, panel0, panel_stride, out); break;
        case 3: amx_panels<3>(chunks, a_block, a_row_bytes, panel0, panel_stride, out); break;
        case 2: amx_panels<2>(chunks, a_block, a_row_bytes, panel0, panel_stride, out); break;
        default: amx_panels<1>(chunks, a_block, a_row_bytes, panel0, panel_stride, out); break;
      }
      const Index block_rows = std::min(R, m - block * R);
      for (int p = 0; p < passes; ++p) {
        const Index j0 = (p0 + p) * 16;
        const auto lanes = static_cast<__mmask16>((1u << std::min<Index>(16, n - j0)) - 1u);
        for (Index i = 0; i < block_rows; ++i) {
          float* target = c + (block * R + i) * ldc + j0;
          __m512 v = _mm512_load_ps(out + (p * R + i) * 16);
          if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(lanes, target));
          _mm512_mask_storeu_ps(target, lanes, v);
        }
      }
    }
  }
  _tile_release();
}
#endif

/// A register tile of the AVX-512 kernel for products wider than 16 columns: `mr` rows of
/// `vectors` zmm registers (16 columns each), and the blocking that keeps its A micro-panel in L1
/// while B streams from L2 in NC blocks of `blocking.nc` columns.
struct Avx512Tile {
  int vectors;
  Index mr;
  Blocking blocking;
  [[nodiscard]] constexpr Index nr() const { return 16 * vectors; }
};
/// 8 x 48 (24 accumulators): 8 broadcasts and 3 loads of B per 24 multiply-adds, MKL's register
/// block. The step's products of SmolLM2-135M on an Intel Xeon (family 6, model 207) ran
/// 1.06-1.08x as fast as with 14 x 32 at one thread, 1.00-1.03x at two (RESULTS.md, 31st session).
/// NC 480 keeps the block a whole number of panels; MC 192 keeps the row-block thresholds of
/// blocked_gemm (few-row and two-thread paths) where 14 x 32's 196 put them.
inline constexpr Avx512Tile avx512_tile_8x48{3, 8, {.mc = 24 * 8, .nc = 480, .a_panel_in_l1 = true}};
/// 14 x 32 (28 accumulators; its A micro-panel 14 KiB, B blocks 512 KiB): for widths that 48
/// columns would pad more, such as a 64-wide attention head (96 columns against 64). 1.5x the
/// 8 x 32 tile's rate at the training products of a 30M model on a Cascade Lake core.
inline constexpr Avx512Tile avx512_tile_14x32{2, 14, {.mc = 14 * 14, .nc = 512, .a_panel_in_l1 = true}};
inline constexpr Index avx2_nr = 16;
/// Panels of a PackedMatrix on AVX-512: 16 columns, so that few-row products can read three at a
/// time from three places (kernel_avx512_streams).
inline constexpr Index avx512_packed_nr = 16;
/// The 16-column tiles (AVX-512's narrow 8 x 16, AVX2's 6 x 16): a 16 KiB B panel stays in L1
/// while A streams past it.
inline constexpr Blocking sixteen_column_blocking{.mc = 96, .nc = 2048, .a_panel_in_l1 = false};

template <Avx512Tile tile>
VERL_TARGET_AVX512 inline void sgemm_avx512_tile(ThreadPool* pool, Index m, Index n, Index k, Operand<float> a,
                                                 Operand<float> b, float* c, Index ldc, bool accumulate) {
  constexpr bool b_streams_from_l2 = tile.blocking.a_panel_in_l1;
  blocked_gemm<tile.mr, tile.nr(), tile.blocking>(
      pool, m, n, k, a, b, c, ldc, accumulate,
      kernel_avx512<tile.vectors, tile.mr, b_streams_from_l2 ? kernel_b_prefetch_k : 0, b_streams_from_l2>);
}
/// Products wider than 16 columns: the 8 x 48 tile unless its panels would pad n to more columns
/// than 14 x 32's. Every element is the same chain of multiply-adds in either tile, so the choice
/// changes no result.
VERL_TARGET_AVX512 inline void sgemm_avx512(ThreadPool* pool, Index m, Index n, Index k, Operand<float> a,
                                            Operand<float> b, float* c, Index ldc, bool accumulate) {
  auto padded = [n](Index nr) { return (n + nr - 1) / nr * nr; };
  if (padded(avx512_tile_8x48.nr()) <= padded(avx512_tile_14x32.nr())) {
    return sgemm_avx512_tile<avx512_tile_8x48>(pool, m, n, k, a, b, c, ldc, accumulate);
  }
  sgemm_avx512_tile<avx512_tile_14x32>(pool, m, n, k, a, b, c, ldc, accumulate);
}
/// Narrow products (an attention head of 16 or fewer dimensions): one zmm per row, no padding waste.
VERL_TARGET_AVX512 inline void sgemm_avx512_narrow(ThreadPool* pool, Index m, Index n, Index k, Operand<float> a,
                                                   Operand<float> b, float* c, Index ldc, bool accumulate,
                                                   const PackedPanels* prepacked = nullptr) {
  blocked_gemm<8, 16, sixteen_column_blocking>(pool, m, n, k, a, b, c, ldc, accumulate,
                                               kernel_avx512<1, 8, 0>, prepacked);
}
/// Prepacked float32 weights times more than 8 rows (a decode step of a batch): the weights
/// stream from memory, so the kernel prefetches them far ahead; 16-row tiles where the rows fill
/// them (one B load per 16 multiply-adds), else 8. Each element is the same chain of multiply-adds
/// as in every other path (tiles differ only in which elements they hold), so the bits are too.
VERL_TARGET_AVX512 inline void sgemm_avx512_prepacked_blocked(ThreadPool* pool, Index m, Index n, Index k,
                                                              Operand<float> a, Operand<float> b, float* c, Index ldc,
                                                              bool accumulate, const PackedPanels& prepacked) {
  if (m % 16 == 0 || m > 40) {
    return blocked_gemm<16, 16, sixteen_column_blocking>(pool, m, n, k, a, b, c, ldc, accumulate,
                                                         kernel_avx512<1, 16, kernel_b_memory_prefetch_k>, &prepacked);
  }
  blocked_gemm<8, 16, sixteen_column_blocking>(pool, m, n, k, a, b, c, ldc, accumulate,
                                               kernel_avx512<1, 8, kernel_b_memory_prefetch_k>, &prepacked);
}
VERL_TARGET_AVX2 inline void sgemm_avx2(ThreadPool* pool, Index m, Index n, Index k, Operand<float> a,
                                        Operand<float> b, float* c, Index ldc, bool accumulate,
                                        const PackedPanels* prepacked = nullptr) {
  blocked_gemm<6, avx2_nr, sixteen_column_blocking>(pool, m, n, k, a, b, c, ldc, accumulate, kernel_avx2, prepacked);
}

#endif

/// Eigen's product for an operand that is row-major or column-major with an outer stride.
template <class S, class Fn>
void with_eigen_operand(Operand<S> x, Index rows, Index cols, Fn&& fn) {
  using Outer = Eigen::OuterStride<>;
  if (x.col_stride == 1 || cols <= 1) {
    fn(Eigen::Map<const RowMatrix<S>, Eigen::Unaligned, Outer>(x.data, rows, cols, Outer(std::max<Index>(x.row_stride, cols))));
  } else {
    VERL_CHECK_ARG(x.row_stride == 1 || rows <= 1, "gemm: expected a row- or column-major operand, got strides ({}, {})",
                   x.row_stride, x.col_stride);
    using ColMatrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
    fn(Eigen::Map<const ColMatrix, Eigen::Unaligned, Outer>(x.data, rows, cols, Outer(std::max<Index>(x.col_stride, rows))));
  }
}

template <class S>
void eigen_gemm_serial(Index m, Index n, Index k, Operand<S> a, Operand<S> b, S* c, Index ldc, bool accumulate) {
  Eigen::Map<RowMatrix<S>, Eigen::Unaligned, Eigen::OuterStride<>> out(c, m, n, Eigen::OuterStride<>(ldc));
  with_eigen_operand(a, m, k, [&](const auto& a_map) {
    with_eigen_operand(b, k, n, [&](const auto& b_map) {
      if (accumulate) {
        out.noalias() += a_map * b_map;
      } else {
        out.noalias() = a_map * b_map;
      }
    });
  });
}

/// Eigen's products in fixed blocks of rows (or of columns when there are few rows): the split
/// depends only on the shapes, because Eigen's own blocking depends on the block's size.
template <class S>
void eigen_gemm(ThreadPool* pool, Index m, Index n, Index k, Operand<S> a, Operand<S> b, S* c, Index ldc,
                bool accumulate) {
  constexpr Index block = 128;
  if (pool == nullptr) return eigen_gemm_serial(m, n, k, a, b, c, ldc, accumulate);
  if (m >= 2 * block) {
    pool->parallel_for((m + block - 1) / block, [&](Index t) {
      const Index r0 = t * block;
      eigen_gemm_serial<S>(std::min(block, m - r0), n, k, {a.data + r0 * a.row_stride, a.row_stride, a.col_stride}, b,
                           c + r0 * ldc, ldc, accumulate);
    });
  } else {
    pool->parallel_for((n + block - 1) / block, [&](Index t) {
      const Index c0 = t * block;
      eigen_gemm_serial<S>(m, std::min(block, n - c0), k, a, {b.data + c0 * b.col_stride, b.row_stride, b.col_stride},
                           c + c0, ldc, accumulate);
    });
  }
}

}  // namespace gemm_detail

/// Below this many multiply-adds a product runs on the calling thread (waking the pool costs more).
inline constexpr double gemm_parallel_min_flops = 1 << 18;

/// C (m x n, rows ldc apart) = A (m x k) B (k x n), or C += A B when `accumulate`; on `pool`'s
/// threads when given and the product is large enough.
template <class S>
void gemm(ThreadPool* pool, Index m, Index n, Index k, Operand<S> a, Operand<S> b, S* c, Index ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) {
      for (Index i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, S(0));
    }
    return;
  }
  if (static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) < gemm_parallel_min_flops) pool = nullptr;
#if VERL_HAS_X86_DISPATCH
  if constexpr (std::same_as<S, float>) {
    const auto level = cpu::simd::best_level();
    // Every element is the same chain of multiply-adds whatever the tile width, so choosing the
    // narrow kernel by shape changes no result.
    if (level == cpu::SimdLevel::avx512 && m < 8 && pool == nullptr) {
      return gemm_detail::sgemm_avx512_few_rows(m, n, k, a, b, c, ldc, accumulate);
    }
    if (level == cpu::SimdLevel::avx512 && n <= 16) {
      return gemm_detail::sgemm_avx512_narrow(pool, m, n, k, a, b, c, ldc, accumulate);
    }
    if (level == cpu::SimdLevel::avx512) return gemm_detail::sgemm_avx512(pool, m, n, k, a, b, c, ldc, accumulate);
    if (level == cpu::SimdLevel::avx2) return gemm_detail::sgemm_avx2(pool, m, n, k, a, b, c, ldc, accumulate);
  }
#endif
  gemm_detail::eigen_gemm(pool, m, n, k, a, b, c, ldc, accumulate);
}

/// A constant B operand (a weight) packed once for the float kernels of this CPU, so that products
/// with few rows (decode steps) read it once instead of re-packing it every call. Empty where the
/// products use Eigen (no AVX2), and then ignored.
class PackedMatrix {
 public:
  PackedMatrix() = default;

  static PackedMatrix pack(Operand<float> b, Index k, Index n, DecodePrecision precision = DecodePrecision::float32,
                           bool allow_tiles = true) {
    PackedMatrix packed;
    packed.repack(b, k, n, precision, allow_tiles);
    return packed;
  }

  /// Packs B (k x n) into this matrix, reusing its memory when it has room: packing the weights
  /// of a model afresh for every rollout cost more in page faults than in copying.
  ///
  /// bfloat16 rounds every value to nearest even, and products with it round A too: bfloat16
  /// inputs, float32 sums, as a bfloat16 inference engine computes. Where the CPU has AMX tiles
  /// (and `allow_tiles`), the values go into tile panels and the tiles multiply them (their own
  /// order of float32 sums); otherwise AVX-512 stores them in 16 bits (half the bytes to read) and
  /// AVX2 as the same values in float32, and each product is bit for bit the float32 product of
  /// the rounded operands.
  void repack(Operand<float> b, Index k, Index n, DecodePrecision precision = DecodePrecision::float32,
              bool allow_tiles = true) {
    precision_ = precision;
    tile_depth_ = 0;
#if VERL_HAS_X86_DISPATCH
    const auto level = cpu::simd::best_level();
    if (level == cpu::SimdLevel::avx512) {
      if (precision == DecodePrecision::bfloat16) {
        data_.clear();
#if VERL_HAS_AMX_DISPATCH
        if (allow_tiles && gemm_detail::amx_bf16_usable()) return fill_tiles(b, k, n);
#endif
        fill_bf16(b, k, n);
      } else {
        bf16_.clear();
        fill<gemm_detail::avx512_packed_nr>(b, k, n);
      }
      return;
    }
    if (level == cpu::SimdLevel::avx2) {
      bf16_.clear();
      fill<gemm_detail::avx2_nr>(b, k, n);
      if (precision == DecodePrecision::bfloat16) {
        for (float& x : data_) x = bf16_bits_to_float(float_to_bf16_bits(x));
      }
      return;
    }
#else
    (void)b, (void)k, (void)n;
#endif
    (void)allow_tiles;
    VERL_CHECK_ARG(precision == DecodePrecision::float32,
                   "precision: decoding with bfloat16 weights needs an x86-64 CPU with AVX2 or AVX-512");
    data_.clear();
    bf16_.clear();
  }

  [[nodiscard]] bool empty() const { return data_.empty() && bf16_.empty(); }
  [[nodiscard]] DecodePrecision precision() const { return precision_; }
  [[nodiscard]] Index rows() const { return rows_; }
  [[nodiscard]] Index cols() const { return cols_; }
  [[nodiscard]] std::size_t bytes() const { return data_.size() * sizeof(float) + bf16_.size() * sizeof(std::uint16_t); }
  [[nodiscard]] gemm_detail::PackedPanels panels() const {
    if (!bf16_.empty()) return {nullptr, padded_cols_, 0, nr_, bf16_.data(), tile_depth_};
    return {data_.data(), padded_cols_, 0, nr_};
  }

 private:
  void set_shape(Index k, Index n, Index nr) {
    rows_ = k;
    cols_ = n;
    nr_ = nr;
    padded_cols_ = (n + nr - 1) / nr * nr;
  }

  template <Index NR>
  void fill(Operand<float> b, Index k, Index n) {
    set_shape(k, n, NR);
    // pack_b writes every element (zeroing partial panels), so reused memory needs no clearing.
    data_.resize(static_cast<std::size_t>(k * padded_cols_));
    const Index kc_block = gemm_detail::kc_block_of(k);
    for (Index pc = 0; pc < k; pc += kc_block) {
      const Index kc = std::min(kc_block, k - pc);
      gemm_detail::pack_b<NR>({b.data + pc * b.row_stride, b.row_stride, b.col_stride}, kc, n,
                              data_.data() + pc * padded_cols_);
    }
  }

#if VERL_HAS_X86_DISPATCH
  /// The panels of fill<16>, one at a time through a small buffer, rounded to bfloat16 and with
  /// their rows in pairs (gemm_detail::pack_bf16_pairs_avx512).
  void fill_bf16(Operand<float> b, Index k, Index n) {
    constexpr Index NR = gemm_detail::avx512_packed_nr;
    set_shape(k, n, NR);
    // Only the last KC block can be odd: its panels take one more (padding) row each.
    bf16_.resize(static_cast<std::size_t>(gemm_detail::PackedPanels::bf16_panel_depth(k) * padded_cols_));
    alignas(64) float panel[gemm_detail::max_kc_block * NR];
    const Index kc_block = gemm_detail::kc_block_of(k);
    for (Index pc = 0; pc < k; pc += kc_block) {
      const Index kc = std::min(kc_block, k - pc);
      for (Index j0 = 0; j0 < n; j0 += NR) {
        gemm_detail::pack_b<NR>({b.data + pc * b.row_stride + j0 * b.col_stride, b.row_stride, b.col_stride}, kc,
                                std::min(NR, n - j0), panel);
        gemm_detail::pack_bf16_pairs_avx512(
            panel, kc, bf16_.data() + pc * padded_cols_ + j0 * gemm_detail::PackedPanels::bf16_panel_depth(kc));
      }
    }
  }
#endif

#if VERL_HAS_AMX_DISPATCH
  /// AMX tile panels: 16 columns each, the whole depth padded with zeros to a multiple of 32, as
  /// rows of (B(2r, j), B(2r + 1, j)) for the panel's 16 columns j (the B operand layout of
  /// TDPBF16PS): a pair of bfloat16 values per 32-bit word, 16 words per row.
  void fill_tiles(Operand<float> b, Index k, Index n) {
    constexpr Index NR = 16, K = gemm_detail::amx_k_per_tile;
    set_shape(k, n, NR);
    tile_depth_ = (k + K - 1) / K * K;
    bf16_.resize(static_cast<std::size_t>(tile_depth_ * padded_cols_));
    const Index pairs = tile_depth_ / 2;
    std::vector<float> column(static_cast<std::size_t>(tile_depth_), 0.0f);
    std::vector<std::uint16_t> rounded(static_cast<std::size_t>(tile_depth_));
    for (Index col = 0; col < padded_cols_; ++col) {
      // Column `col` of B, rounded, then each pair of k to its place in every tile row.
      if (col < n) {
        for (Index kk = 0; kk < k; ++kk) column[static_cast<std::size_t>(kk)] = b.at(kk, col);
        gemm_detail::round_to_bf16_avx512(column.data(), tile_depth_, rounded.data());
      } else {
        std::fill(rounded.begin(), rounded.end(), std::uint16_t{0});
      }
      std::uint16_t* out = bf16_.data() + (col / NR) * NR * tile_depth_ + 2 * (col % NR);
      for (Index pair = 0; pair < pairs; ++pair) {
        std::memcpy(out + 2 * pair * NR, rounded.data() + 2 * pair, 2 * sizeof(std::uint16_t));
      }
    }
  }
#endif

  std::vector<float> data_;
  std::vector<std::uint16_t> bf16_;
  DecodePrecision precision_ = DecodePrecision::float32;
  Index rows_ = 0, cols_ = 0, padded_cols_ = 0, nr_ = 0, tile_depth_ = 0;
};

/// C (+)= A B with B given both as an operand and, when not empty, packed (see PackedMatrix).
inline void gemm(ThreadPool* pool, Index m, Index n, Index k, Operand<float> a, Operand<float> b,
                 const PackedMatrix& packed, float* c, Index ldc, bool accumulate) {
#if VERL_HAS_X86_DISPATCH
  if (!packed.empty() && m > 0 && n > 0 && k > 0) {
    VERL_CHECK_ARG(packed.rows() == k && packed.cols() == n, "packed: expected a ({}, {}) operand, got ({}, {})", k, n,
                   packed.rows(), packed.cols());
    if (static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) < gemm_parallel_min_flops) pool = nullptr;
    const auto panels = packed.panels();
    const auto level = cpu::simd::best_level();
    // bfloat16 products take A rounded too (the tiles round it as they load it).
    thread_local std::vector<float> rounded_a;
    if (packed.precision() == DecodePrecision::bfloat16 && panels.tile_depth == 0) {
      rounded_a.resize(static_cast<std::size_t>(m * k));
      if (level == cpu::SimdLevel::avx512) {
        gemm_detail::round_rows_to_bf16_avx512(a, m, k, rounded_a.data());
      } else {
        for (Index i = 0; i < m; ++i) {
          for (Index j = 0; j < k; ++j) rounded_a[static_cast<std::size_t>(i * k + j)] = bf16_bits_to_float(float_to_bf16_bits(a.at(i, j)));
        }
      }
      a = rows_of(rounded_a.data(), k);
    }
    if (level == cpu::SimdLevel::avx512 && panels.nr == gemm_detail::avx512_packed_nr) {
      const bool bf16 = panels.bf16 != nullptr;
      // float32 products of many rows (a prefill) go through the blocked loops, whose packed A
      // blocks are reused across more columns; bfloat16 panels only through the streams kernel.
      if (m > 8 && !bf16) return gemm_detail::sgemm_avx512_prepacked_blocked(pool, m, n, k, a, b, c, ldc, accumulate, panels);
      auto run = [&](Index columns, const gemm_detail::PackedPanels& sub, float* out) {
#if VERL_HAS_AMX_DISPATCH
        if (sub.tile_depth > 0) return gemm_detail::sgemm_amx_prepacked(m, columns, k, a, sub, out, ldc, accumulate);
#endif
        if (bf16) {
          gemm_detail::sgemm_avx512_prepacked_rows<std::uint16_t>(m, columns, k, a, sub, out, ldc, accumulate);
        } else {
          gemm_detail::sgemm_avx512_prepacked_rows<float>(m, columns, k, a, sub, out, ldc, accumulate);
        }
      };
      constexpr Index nr = gemm_detail::avx512_packed_nr;
      const Index count = (n + nr - 1) / nr;
      // Independent column ranges, a few per thread (each task reads its own streams).
      const Index groups = pool == nullptr || pool->size() <= 1 ? 1
                                           : std::min<Index>(4 * static_cast<Index>(pool->size()),
                                                             std::max<Index>(1, n / gemm_detail::min_columns_per_task));
      if (groups <= 1) return run(n, panels, c);
      const Index per_group = (count + groups - 1) / groups;
      pool->parallel_for((count + per_group - 1) / per_group, [&](Index g) {
        auto sub = panels;
        sub.first_panel += g * per_group;
        const Index j0 = g * per_group * nr;
        run(std::min(n, j0 + per_group * nr) - j0, sub, c + j0);
      });
      return;
    }
    if (level == cpu::SimdLevel::avx2 && panels.nr == gemm_detail::avx2_nr) {
      return gemm_detail::sgemm_avx2(pool, m, n, k, a, b, c, ldc, accumulate, &panels);
    }
  }
#endif
  gemm<float>(pool, m, n, k, a, b, c, ldc, accumulate);
}

/// Single-threaded C (+)= A B.
template <class S>
void gemm(Index m, Index n, Index k, Operand<S> a, Operand<S> b, S* c, Index ldc, bool accumulate) {
  gemm<S>(static_cast<ThreadPool*>(nullptr), m, n, k, a, b, c, ldc, accumulate);
}

}  // namespace verl::cpu
