// Recursive doubling and Rabenseifner's all-reduce over MPI point-to-point, the two
// latency-lean algorithms beside the ring (Thakur, Rabenseifner and Gropp, "Optimization of
// Collective Communication Operations in MPICH", 2005; gloo's halving-doubling).
//
// - Recursive doubling: log2(p) steps; in step k each rank swaps its whole vector with the
//   rank 2^k away and reduces. Every rank sends log2(p) x the message: best for small
//   messages, where the step count (latency) dominates.
// - Rabenseifner: a reduce-scatter by recursive halving (log2(p) steps, each exchanging half
//   of what is left) then an all-gather by recursive doubling: 2 log2(p) steps and
//   2(p-1)/p of the message per rank, the ring's volume in far fewer steps. Best for middle
//   sizes; the ring's chunked pipeline wins once the message dwarfs the latency.
//   The first halving step pairs neighbouring ranks (distance 1) and swaps the largest
//   halves, so with ranks placed host by host the big exchanges stay inside a host.
//
// Rank counts that are not a power of two: the first 2r ranks (r = p - 2^floor(log2 p)) fold
// in pairs first (each even rank sends its vector to the odd rank above it, which reduces),
// the 2^k remaining ranks run the algorithm, and the odd ranks hand the result back.
//
// Every element of the result is computed by the same sequence of pairwise combinations on
// every rank that holds it (sums are commutative), so all ranks end bit-identical: data
// parallel replicas stay equal.
#pragma once

#include "dtrain/comm/communicator.h"

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace dtrain::dist::mpi {

class HalvingDoubling {
 public:
  // Collective over `comm`, which it duplicates so that its messages never meet others.
  explicit HalvingDoubling(MPI_Comm comm);
  ~HalvingDoubling();
  HalvingDoubling(const HalvingDoubling&) = delete;
  HalvingDoubling& operator=(const HalvingDoubling&) = delete;

  // In place over `count` elements; op is Sum, Max or Min (a Mean runs as a Sum: the caller divides).
  void recursive_doubling(void* data, std::size_t count, DType dtype, ReduceOp op);
  void rabenseifner(void* data, std::size_t count, DType dtype, ReduceOp op);

 private:
  // The folding of a non-power-of-two rank count: returns this rank's rank among the 2^k
  // that run the algorithm, or -1 for a rank that folded its vector away and only waits.
  int fold_in(std::byte* data, std::size_t count, DType dtype, ReduceOp op);
  void fold_out(std::byte* data, std::size_t bytes, int folded_rank);
  int real_rank(int folded_rank) const;  // the inverse of fold_in's numbering
  std::byte* scratch(std::size_t bytes);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int pof2_ = 1;  // the largest power of two <= size_
  std::vector<std::byte> scratch_;
};

}  // namespace dtrain::dist::mpi
