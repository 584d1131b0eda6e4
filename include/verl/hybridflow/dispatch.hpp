// verl's dispatch modes (single_controller/base/decorator.py): how the controller's arguments of
// one worker-group call are split over the group's ranks, and how the ranks' results are
// collected into the call's result. The split and collect functions here are pure (no MPI): the
// runtime (runtime.hpp) moves their pieces.
//
//   mode                        | arguments                               | result
//   ONE_TO_ALL                  | the same to every rank                  | one per rank
//   ALL_TO_ALL / DP_COMPUTE     | one per rank (a list of world_size)     | one per rank
//   RANK_ZERO                   | to rank 0 only (it alone runs)          | rank 0's
//   DP_COMPUTE_PROTO            | DataProtos chunked over the ranks       | the chunks' results concatenated
//   DP_COMPUTE_PROTO_WITH_FUNC  | a value to all, then chunked DataProtos | concatenated
//   DP_COMPUTE_METRIC           | chunked DataProtos                      | one per rank
//   MEGATRON_COMPUTE_PROTO      | chunked over the data-parallel groups   | from tp rank 0 of the last pipeline
//                               | (every rank of a dp group: the same)    | stage of each dp group, concatenated
//
// Padding follows verl: a DataProto whose meta_info has "_verl_auto_padding": true is padded to
// a multiple of the chunk count with copies of its leading rows, and the padded rows are cut from
// the concatenated result; without it a batch that does not divide is an error.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/parallel/axis.hpp"
#include "verl/parallel/mesh.hpp"

namespace verl::hybridflow {

enum class Dispatch : std::uint8_t {
  one_to_all,
  all_to_all,
  rank_zero,
  dp_compute,
  dp_compute_proto,
  dp_compute_proto_with_func,
  dp_compute_metric,
  megatron_compute_proto,
};

/// verl's name of a mode (its Dispatch enum).
constexpr std::string_view to_string(Dispatch mode) noexcept {
  switch (mode) {
    case Dispatch::one_to_all: return "ONE_TO_ALL";
    case Dispatch::all_to_all: return "ALL_TO_ALL";
    case Dispatch::rank_zero: return "RANK_ZERO";
    case Dispatch::dp_compute: return "DP_COMPUTE";
    case Dispatch::dp_compute_proto: return "DP_COMPUTE_PROTO";
    case Dispatch::dp_compute_proto_with_func: return "DP_COMPUTE_PROTO_WITH_FUNC";
    case Dispatch::dp_compute_metric: return "DP_COMPUTE_METRIC";
    case Dispatch::megatron_compute_proto: return "MEGATRON_COMPUTE_PROTO";
  }
  return "?";
}

/// Modes whose DataProto arguments are chunked over the (data-parallel) ranks.
constexpr bool splits_data_proto(Dispatch mode) noexcept {
  return mode == Dispatch::dp_compute_proto || mode == Dispatch::dp_compute_proto_with_func ||
         mode == Dispatch::dp_compute_metric || mode == Dispatch::megatron_compute_proto;
}
/// Modes whose arguments are one list per argument with an element per rank.
constexpr bool takes_one_argument_per_rank(Dispatch mode) noexcept {
  return mode == Dispatch::all_to_all || mode == Dispatch::dp_compute;
}
/// Modes whose result is the concatenation of the ranks' DataProtos.
constexpr bool concatenates_results(Dispatch mode) noexcept {
  return mode == Dispatch::dp_compute_proto || mode == Dispatch::dp_compute_proto_with_func ||
         mode == Dispatch::megatron_compute_proto;
}

/// The (tp, dp, pp) layout of a worker group that trains Megatron-style, in Megatron's rank
/// order (tp fastest, then dp, then pp). A group without one is all data-parallel.
using GroupMesh = parallel::Mesh<parallel::TP<>, parallel::DP<>, parallel::PP<>>;

/// DataProtos chunked for `chunks` receivers, and the rows of padding verl added.
struct ChunkedProtos {
  std::vector<std::vector<data::DataProto>> chunks;  ///< [argument][chunk]
  Index padding = 0;
};

/// verl's padding flag on a DataProto (meta_info "_verl_auto_padding").
inline bool padding_enabled(const data::DataProto& proto) {
  const auto& meta = proto.meta_info();
  if (!meta.is_object()) return false;
  const auto found = meta.find("_verl_auto_padding");
  return found != meta.end() && found->is_boolean() && found->get<bool>();
}

/// verl's _split_args_kwargs_data_proto_with_auto_padding: each DataProto chunked into `chunks`
/// equal parts; those with padding enabled are first padded (all must then have one length).
inline ChunkedProtos chunk_protos(std::span<const data::DataProto> arguments, Index chunks, std::string_view call) {
  VERL_CHECK_ARG(chunks > 0, "{}: expected a positive number of chunks, got {}", call, chunks);
  ChunkedProtos out;
  std::optional<Index> padded_length;
  for (std::size_t a = 0; a < arguments.size(); ++a) {
    data::DataProto proto = arguments[a];
    if (padding_enabled(proto)) {
      if (!padded_length) {
        padded_length = proto.size();
        out.padding = proto.size() % chunks == 0 ? 0 : chunks - proto.size() % chunks;
      }
      VERL_CHECK_ARG(proto.size() == *padded_length,
                     "{}: argument {}: padding needs DataProtos of one length ({}), got {}", call, a, *padded_length,
                     proto.size());
      proto.pad_to_divisor(chunks);
    }
    if (chunks == 1) {  // one receiver: the whole batch, no slicing copy
      out.chunks.push_back({std::move(proto)});
      continue;
    }
    VERL_CHECK_ARG(proto.size() % chunks == 0,
                   "{}: argument {}: a batch of {} rows does not split over {} ranks (set meta_info "
                   "\"_verl_auto_padding\": true to pad it as verl does)",
                   call, a, proto.size(), chunks);
    out.chunks.push_back(proto.chunk(chunks));
  }
  return out;
}

/// verl's collect for the concatenating modes: the parts in rank order, padding cut.
inline data::DataProto concat_and_unpad(std::vector<data::DataProto> parts, Index padding) {
  data::DataProto joined = parts.size() == 1 ? std::move(parts.front()) : data::DataProto::concat(parts);
  joined.unpad(padding);
  return joined;
}

/// Which data-parallel chunk rank `rank` of a group receives, and whether its result is
/// collected. Without a mesh every rank is its own dp rank and every result is collected.
struct RankRole {
  Index dp_rank = 0;
  bool collect = true;
};

inline RankRole megatron_role(const GroupMesh& mesh, std::int64_t rank) {
  using parallel::AxisKind;
  const bool first_tp = mesh.coord(rank, AxisKind::tp) == 0;
  const bool last_pp = mesh.coord(rank, AxisKind::pp) == mesh.size(AxisKind::pp) - 1;
  return {.dp_rank = mesh.coord(rank, AxisKind::dp), .collect = first_tp && last_pp};
}

}  // namespace verl::hybridflow
