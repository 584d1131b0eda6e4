// expect: ALGORITHM_MUST_MAP_SEQLENS_AND_K_TO_PARTITIONS_AND_HAVE_A_NAME
// An int is not a partitioning algorithm: the misuse is named, not buried in template errors.
#include <cstdint>
#include <vector>

#include "verl/parallel/seqlen_balancing.hpp"

int main() { (void)verl::parallel::get_seqlen_balanced_partitions(42, std::vector<std::int64_t>{1, 2}, 1); }
