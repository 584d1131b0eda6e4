// seqlen_balancing.json: verl/utils/seqlen_balancing.py. Partitions are compared exactly (order
// included), even for the "spread_and_validity" cases: the port reproduces verl's tie-breaking.
#include <cstdint>
#include <string>
#include <vector>

#include "handlers.hpp"
#include "verl/parallel/seqlen_balancing.hpp"

namespace verl::conformance {
namespace {

using parallel::Partitions;

std::vector<std::int64_t> int_list(const json& list) { return list.get<std::vector<std::int64_t>>(); }
std::int64_t int_arg(const GoldenCase& c, const char* key) { return c.args().at(key).get<std::int64_t>(); }

parallel::AnyPartitionAlgorithm algorithm_of(const GoldenCase& c, std::string_view name) {
  return parallel::make_partition_algorithm(name, c.args().at("equal_size").get<bool>());
}

/// Fails the case for every output key that no comparison covered.
void require_compared(const GoldenCase& c, CaseCheck& check, std::initializer_list<std::string_view> compared) {
  for (auto it = c.outputs().begin(); it != c.outputs().end(); ++it) {
    bool covered = false;
    for (const auto key : compared) covered = covered || key == it.key();
    if (!covered) check.fail(it.key(), "output '" + it.key() + "' is not compared by the handler");
  }
}

/// partitions, partition_sums, spread and partition_sizes of a partitioning of `seqlens`.
void check_partitions(CaseCheck& check, const std::vector<std::int64_t>& seqlens, const Partitions& partitions) {
  const auto sums = parallel::partition_sums(seqlens, partitions);
  check.exact("partitions", json(partitions));
  check.exact("partition_sums", json(sums));
  check.exact("spread", json(parallel::partition_spread(sums)));
  check.exact("partition_sizes", json(parallel::partition_sizes(partitions)));
}

void partition_case(const GoldenCase& c, CaseCheck& check, const parallel::AnyPartitionAlgorithm& algorithm,
                    bool balanced) {
  const auto seqlens = int_list(c.inputs().at("seqlen_list"));
  const int k = c.args().at("k_partitions").get<int>();
  const Partitions partitions = balanced ? parallel::get_seqlen_balanced_partitions(algorithm, seqlens, k)
                                         : parallel::partition(algorithm, seqlens, k);
  check_partitions(check, seqlens, partitions);
  require_compared(c, check, {"partitions", "partition_sums", "spread", "partition_sizes"});
}

void register_seqlen_balancing(HandlerTable& table) {
  table["karmarkar_karp"] = [](const GoldenCase& c, CaseCheck& check) {
    partition_case(c, check, algorithm_of(c, "karmarkar_karp"), false);
  };
  table["greedy_partition"] = [](const GoldenCase& c, CaseCheck& check) {
    partition_case(c, check, algorithm_of(c, "greedy_partition"), false);
  };
  table["get_seqlen_balanced_partitions"] = [](const GoldenCase& c, CaseCheck& check) {
    partition_case(c, check, algorithm_of(c, "karmarkar_karp"), true);
  };

  table["calculate_workload"] = [](const GoldenCase& c, CaseCheck& check) {
    const auto seqlens = c.input_tensor("seqlen_list");
    if (seqlens.dtype == "int64") {
      check.exact("workload", json(parallel::calculate_workload(seqlens.int64s())));
    } else {
      const VectorF lengths = seqlens.vector<float>();
      const auto workload = parallel::calculate_workload(std::span<const float>(lengths.data(), lengths.size()));
      check.tensor("workload", Eigen::Map<const VectorF>(workload.data(), static_cast<Index>(workload.size())),
                   c.tolerance());
    }
    require_compared(c, check, {"workload"});
  };

  table["ceildiv"] = [](const GoldenCase& c, CaseCheck& check) {
    check.exact("result", json(parallel::ceildiv(int_arg(c, "a"), int_arg(c, "b"))));
    require_compared(c, check, {"result"});
  };
  table["roundup_divisible"] = [](const GoldenCase& c, CaseCheck& check) {
    check.exact("result", json(parallel::roundup_divisible(int_arg(c, "a"), int_arg(c, "b"))));
    require_compared(c, check, {"result"});
  };
  table["get_reverse_idx"] = [](const GoldenCase& c, CaseCheck& check) {
    check.exact("result", json(parallel::get_reverse_idx(int_list(c.inputs().at("idx_map")))));
    require_compared(c, check, {"result"});
  };

  table["get_group_balanced_partitions"] = [](const GoldenCase& c, CaseCheck& check) {
    const auto seqlens = int_list(c.inputs().at("seqlen_list"));
    const auto uids = c.inputs().at("uid_list").get<std::vector<std::string>>();
    const int k = c.args().at("k_partitions").get<int>();
    const Partitions partitions = parallel::get_group_balanced_partitions(seqlens, uids, k);
    check_partitions(check, seqlens, partitions);
    const auto workload_sums = parallel::partition_sums(parallel::calculate_workload(seqlens), partitions);
    check.exact("workload_partition_sums", json(workload_sums));
    check.exact("workload_spread", json(parallel::partition_spread(workload_sums)));
    require_compared(
        c, check,
        {"partitions", "partition_sums", "spread", "partition_sizes", "workload_partition_sums", "workload_spread"});
  };

  table["log_seqlen_unbalance"] = [](const GoldenCase& c, CaseCheck& check) {
    const auto seqlens = int_list(c.inputs().at("seqlen_list"));
    const auto partitions = c.inputs().at("partitions").get<Partitions>();
    const Metrics metrics =
        parallel::log_seqlen_unbalance(seqlens, partitions, c.args().at("prefix").get<std::string>());
    for (auto it = c.outputs().begin(); it != c.outputs().end(); ++it) {
      const auto found = metrics.find(it.key());
      if (found == metrics.end()) {
        check.fail(it.key(), "metric '" + it.key() + "' is missing");
        continue;
      }
      check.scalar(it.key(), found->second, c.tolerance());
    }
    for (const auto& [key, value] : metrics)
      if (!c.outputs().contains(key)) check.fail(key, "metric '" + key + "' is not one of verl's");
  };

  table["rearrange_micro_batches"] = [](const GoldenCase& c, CaseCheck& check) {
    const auto& args = c.args();
    parallel::MicroBatchOptions options;
    options.max_token_len = int_arg(c, "max_token_len");
    if (args.contains("num_batches_divided_by") && !args.at("num_batches_divided_by").is_null())
      options.num_batches_divided_by = args.at("num_batches_divided_by").get<std::int64_t>();
    if (args.contains("min_num_micro_batch") && !args.at("min_num_micro_batch").is_null())
      options.min_num_micro_batch = args.at("min_num_micro_batch").get<std::int64_t>();
    options.use_dynamic_bsz_balance = args.value("use_dynamic_bsz_balance", true);
    if (args.contains("force_group_size") && !args.at("force_group_size").is_null())
      options.force_group_size = args.at("force_group_size").get<std::int64_t>();
    const auto mask = c.input_tensor("attention_mask").matrix<std::int64_t>();
    const auto plan = parallel::rearrange_micro_batches(mask, options);
    check.exact("micro_bsz_idx", json(plan.micro_bsz_idx));
    check.exact("micro_batch_workloads", json(plan.micro_batch_workloads));
    check.exact("num_micro_batches", json(plan.num_micro_batches()));
    require_compared(c, check, {"micro_bsz_idx", "micro_batch_workloads", "num_micro_batches"});
  };
}

const Registrar registrar{register_seqlen_balancing};

}  // namespace
}  // namespace verl::conformance
