// Which elements of a parameter a tensor-parallel rank holds, as layouts over the parameter's
// row-major elements, and how a smaller shard is placed inside a larger one (the copies that
// turn micro-DP all-gather output into a generation-layout shard).
//
// A parameter has torch's shape [rows, cols] (a Linear weight is [out, in]). Megatron's
// ColumnParallelLinear splits rows (the output dimension), RowParallelLinear splits cols;
// a fused weight (vLLM's qkv [q; k; v], gate/up [gate; up]) splits each block separately, so a
// rank's shard is one piece per block and gathering shards in rank order interleaves the blocks.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

#include "verl/core/error.hpp"
#include "verl/core/layout.hpp"

namespace verl::parallel {

enum class TensorParallelSplit : std::uint8_t { replicated, column, row };

constexpr std::string_view to_string(TensorParallelSplit split) noexcept {
  switch (split) {
    case TensorParallelSplit::replicated: return "replicated";
    case TensorParallelSplit::column: return "column";
    case TensorParallelSplit::row: return "row";
  }
  return "?";
}

inline constexpr std::size_t max_fused_blocks = 8;

/// How a parameter is laid out and split over tensor parallelism.
struct ParamSpec {
  std::int64_t rows = 0;
  std::int64_t cols = 1;
  TensorParallelSplit split = TensorParallelSplit::replicated;
  /// Rows of each fused block along the split dimension (one block when not fused).
  std::array<std::int64_t, max_fused_blocks> block_rows{};
  std::size_t num_blocks = 1;
  /// Shard boundaries fall on multiples of this many rows (Megatron's interleaved qkv splits
  /// whole query groups).
  std::int64_t row_granule = 1;

  constexpr std::int64_t numel() const noexcept { return rows * cols; }

  static constexpr ParamSpec replicated(std::int64_t rows, std::int64_t cols = 1) {
    return make(rows, cols, TensorParallelSplit::replicated, {rows}, 1);
  }
  /// Megatron's ColumnParallelLinear weight [out, in] (or its bias, cols = 1).
  static constexpr ParamSpec column_parallel(std::int64_t rows, std::int64_t cols = 1, std::int64_t row_granule = 1) {
    return make(rows, cols, TensorParallelSplit::column, {rows}, row_granule);
  }
  /// Megatron's RowParallelLinear weight [out, in], split along in.
  static constexpr ParamSpec row_parallel(std::int64_t rows, std::int64_t cols) {
    return make(rows, cols, TensorParallelSplit::row, {rows}, 1);
  }
  /// Column-parallel weight fused from blocks stacked along rows, each split over TP.
  static constexpr ParamSpec fused_column_parallel(std::initializer_list<std::int64_t> block_rows, std::int64_t cols) {
    std::int64_t rows = 0;
    for (auto b : block_rows) rows += b;
    return make(rows, cols, TensorParallelSplit::column, block_rows, 1);
  }
  /// vLLM's QKVParallelLinear weight [q; k; v]: each rank holds its query heads and kv heads.
  static constexpr ParamSpec fused_qkv(std::int64_t num_heads, std::int64_t num_kv_heads, std::int64_t head_dim,
                                       std::int64_t hidden) {
    return fused_column_parallel({num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim}, hidden);
  }
  /// vLLM's MergedColumnParallelLinear gate_up_proj [gate; up].
  static constexpr ParamSpec fused_gate_up(std::int64_t intermediate, std::int64_t hidden) {
    return fused_column_parallel({intermediate, intermediate}, hidden);
  }
  /// Megatron-core's linear_qkv: per query group, its query heads then one k and one v head
  /// (interleaved), so a TP shard is a contiguous run of whole groups.
  static constexpr ParamSpec interleaved_qkv(std::int64_t num_query_groups, std::int64_t heads_per_group,
                                             std::int64_t head_dim, std::int64_t hidden) {
    const std::int64_t group_rows = (heads_per_group + 2) * head_dim;
    return column_parallel(num_query_groups * group_rows, hidden, group_rows);
  }

  friend constexpr bool operator==(const ParamSpec&, const ParamSpec&) = default;

 private:
  static constexpr ParamSpec make(std::int64_t rows, std::int64_t cols, TensorParallelSplit split,
                                  std::initializer_list<std::int64_t> blocks, std::int64_t granule) {
    VERL_CHECK_ARG(rows > 0 && cols > 0, "param: expected a positive shape, got [{}, {}]", rows, cols);
    VERL_CHECK_ARG(blocks.size() >= 1 && blocks.size() <= max_fused_blocks,
                   "block_rows: expected 1 to {} fused blocks, got {}", max_fused_blocks, blocks.size());
    VERL_CHECK_ARG(granule > 0, "row_granule: expected a positive number of rows, got {}", granule);
    ParamSpec spec;
    spec.rows = rows;
    spec.cols = cols;
    spec.split = split;
    spec.num_blocks = blocks.size();
    spec.row_granule = granule;
    std::size_t i = 0;
    for (auto b : blocks) {
      VERL_CHECK_ARG(b > 0, "block_rows: expected positive block sizes, got {} for block {}", b, i);
      spec.block_rows[i++] = b;
    }
    return spec;
  }
};

/// A run-strided piece of a shard: element i of the piece is parameter element
/// offset + layout(i), with layout (run, count):(1, stride).
struct ShardPiece {
  std::int64_t offset = 0;
  Layout<2> layout{};

  constexpr std::int64_t run() const noexcept { return layout.shape[0]; }
  constexpr std::int64_t count() const noexcept { return layout.shape[1]; }
  constexpr std::int64_t stride() const noexcept { return layout.stride[1]; }
  constexpr std::int64_t size() const noexcept { return layout.size(); }
  friend constexpr bool operator==(const ShardPiece&, const ShardPiece&) = default;
};

/// The elements one TP rank holds; its local buffer stores the pieces one after another.
struct ParamShard {
  std::array<ShardPiece, max_fused_blocks> pieces{};
  std::size_t num_pieces = 0;

  constexpr std::int64_t size() const noexcept {
    std::int64_t n = 0;
    for (std::size_t i = 0; i < num_pieces; ++i) n += pieces[i].size();
    return n;
  }
  /// Where piece i starts in the local buffer.
  constexpr std::int64_t local_start(std::size_t piece) const noexcept {
    std::int64_t n = 0;
    for (std::size_t i = 0; i < piece; ++i) n += pieces[i].size();
    return n;
  }
  /// The parameter element stored at local position `local`.
  constexpr std::int64_t global_index(std::int64_t local) const noexcept {
    std::size_t i = 0;
    while (i + 1 < num_pieces && local >= pieces[i].size()) local -= pieces[i++].size();
    return pieces[i].offset + pieces[i].layout(local);
  }
  friend constexpr bool operator==(const ParamShard&, const ParamShard&) = default;
};

/// Shard `index` of `num_shards` (Megatron's TP rank `index` of size `num_shards`).
constexpr ParamShard tp_shard(const ParamSpec& param, std::int64_t num_shards, std::int64_t index) {
  VERL_CHECK_ARG(num_shards > 0, "num_shards: expected a positive count, got {}", num_shards);
  VERL_CHECK_ARG(index >= 0 && index < num_shards, "index: expected a shard index in [0, {}), got {}", num_shards, index);
  ParamShard shard;
  switch (param.split) {
    case TensorParallelSplit::replicated:
      shard.pieces[0] = {0, {{param.numel(), 1}, {1, 0}}};
      shard.num_pieces = 1;
      break;
    case TensorParallelSplit::row: {
      VERL_CHECK_ARG(param.cols % num_shards == 0,
                     "param: expected the tensor-parallel size {} to divide the {} columns of a row-parallel weight",
                     num_shards, param.cols);
      const std::int64_t run = param.cols / num_shards;
      shard.pieces[0] = {index * run, {{run, param.rows}, {1, param.cols}}};
      shard.num_pieces = 1;
      break;
    }
    case TensorParallelSplit::column: {
      std::int64_t block_start = 0;
      for (std::size_t b = 0; b < param.num_blocks; ++b) {
        const std::int64_t rows = param.block_rows[b];
        VERL_CHECK_ARG(rows % (num_shards * param.row_granule) == 0,
                       "param: expected the tensor-parallel size {} to divide the {} rows of block {} in units of {}",
                       num_shards, rows, b, param.row_granule);
        const std::int64_t shard_rows = rows / num_shards;
        shard.pieces[b] = {(block_start + index * shard_rows) * param.cols, {{shard_rows * param.cols, 1}, {1, 0}}};
        block_start += rows;
      }
      shard.num_pieces = param.num_blocks;
      break;
    }
  }
  return shard;
}

/// count runs of `length` elements: run j goes from src + j*src_stride to dst + j*dst_stride.
struct StridedCopy {
  std::int64_t src = 0;
  std::int64_t dst = 0;
  std::int64_t length = 0;
  std::int64_t count = 1;
  std::int64_t src_stride = 0;
  std::int64_t dst_stride = 0;
  friend constexpr bool operator==(const StridedCopy&, const StridedCopy&) = default;
};

/// The copies that put the elements of `inner` (a local buffer in inner's layout) at their
/// places in a local buffer laid out as `outer`. One copy per piece; inner must lie inside
/// outer piece by piece (true for a TP shard inside a coarser TP shard of the same parameter).
struct ShardPlacement {
  std::array<StridedCopy, max_fused_blocks> copies{};
  std::size_t num_copies = 0;

  template <class T>
  void apply(const T* inner_buffer, T* outer_buffer) const {
    for (std::size_t i = 0; i < num_copies; ++i) {
      const StridedCopy& c = copies[i];
      for (std::int64_t j = 0; j < c.count; ++j) {
        const T* from = inner_buffer + c.src + j * c.src_stride;
        std::copy(from, from + c.length, outer_buffer + c.dst + j * c.dst_stride);
      }
    }
  }
  /// The inverse move: extract inner's elements from an outer-layout buffer.
  template <class T>
  void extract(const T* outer_buffer, T* inner_buffer) const {
    for (std::size_t i = 0; i < num_copies; ++i) {
      const StridedCopy& c = copies[i];
      for (std::int64_t j = 0; j < c.count; ++j) {
        const T* from = outer_buffer + c.dst + j * c.dst_stride;
        std::copy(from, from + c.length, inner_buffer + c.src + j * c.src_stride);
      }
    }
  }
};

constexpr ShardPlacement place_shard(const ParamShard& inner, const ParamShard& outer) {
  VERL_CHECK_ARG(inner.num_pieces == outer.num_pieces, "inner: expected {} pieces like outer, got {}", outer.num_pieces,
                 inner.num_pieces);
  ShardPlacement placement;
  for (std::size_t i = 0; i < inner.num_pieces; ++i) {
    const ShardPiece& in = inner.pieces[i];
    const ShardPiece& out = outer.pieces[i];
    const std::int64_t shift = in.offset - out.offset;
    const bool same_rows = in.count() == out.count() && (in.count() == 1 || in.stride() == out.stride());
    VERL_CHECK_ARG(same_rows && shift >= 0 && shift + in.run() <= out.run(),
                   "inner: expected piece {} (offset {}, {} runs of {}) inside outer's (offset {}, {} runs of {})", i,
                   in.offset, in.count(), in.run(), out.offset, out.count(), out.run());
    placement.copies[i] = {inner.local_start(i), outer.local_start(i) + shift, in.run(), in.count(), in.run(), out.run()};
  }
  placement.num_copies = inner.num_pieces;
  return placement;
}

}  // namespace verl::parallel
