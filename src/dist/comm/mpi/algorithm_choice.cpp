#include "dist/comm/mpi/algorithm_choice.h"

namespace dtrain::dist::mpi {

// Measured with bench_allreduce (f32 sum, median bus bandwidth in GB/s, the three side by
// side in one run on 2 vCPUs of an AMD EPYC shared with other jobs; the full tables are in
// bench/results/allreduce_np2.txt and allreduce_np4.txt):
//
//   2 ranks        4 KB  64 KB   1 MB  16 MB  256 MB
//   MPI_Allreduce   4.0    6.5   12.0    6.4    2.5
//   plain ring      4.1    6.5   11.6    6.3    4.8
//   SharedMemory    7.9   25.1   28.8   17.6   14.3   (memcpy in that run: 10.3 GB/s per rank)
//
// With 4 ranks on the 2 cores SharedMemory was also 1.8-8x faster than both at every size
// from 4 KB to 64 MB. So on one host it runs at every size. Across hosts (not measurable
// on this one-host machine) its hierarchical scheme sends a large message over the network
// once per host instead of once per rank, while a small message is latency-bound, and
// MPI's recursive doubling takes log2(ranks) steps against the leaders' ring's
// 2 x (hosts - 1): below 256 KB, MPI_Allreduce.
AllReduceAlgorithm choose_all_reduce(std::size_t bytes, bool single_host) {
  constexpr std::size_t kMultiHostShmFrom = std::size_t{256} << 10;
  if (single_host || bytes >= kMultiHostShmFrom) return AllReduceAlgorithm::SharedMemory;
  return AllReduceAlgorithm::Mpi;
}

}  // namespace dtrain::dist::mpi
