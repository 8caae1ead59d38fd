// Reduce-scatter, all-gather and broadcast over MPI point-to-point: the algorithms that
// CollectiveAlgorithm names besides Mpi, for the table to choose between by size and shape
// (docs/COLLECTIVES.md).
//
// - Ring reduce-scatter / all-gather: n-1 steps between ring neighbours, each moving one
//   block in 1 MB chunks, so that a chunk is reduced while the next one arrives. Every rank
//   sends (n-1)/n of the message: the bandwidth optimum, in n-1 latencies.
// - Recursive halving reduce-scatter: log2(p) steps; in each the ranks pair up across half
//   of the rank range left and swap the half of the data that the partner keeps (MPICH's
//   algorithm for commutative operations). Recursive doubling all-gather: the mirror image,
//   each step doubling the blocks a rank holds. Both move the ring's volume in log2(p)
//   latencies; rank counts that are not a power of two fold in pairs first, as in
//   halving_doubling.h (a folded pair's two blocks travel together).
// - Binomial-tree broadcast: log2(p) rounds, each rank that has the message sending it
//   whole to one more: small messages. Chain broadcast: the message travels down the ranks
//   (from the root) in 256 KB chunks, each rank forwarding a chunk while the next arrives:
//   every link carries the message once, for large messages.
//
// Every element of a reduce-scatter result is reduced on one rank only, so no two ranks
// need to agree on its bits (unlike the all-reduce).
#pragma once

#include "dtrain/comm/communicator.h"

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace dtrain::dist::mpi {

class P2pCollectives {
 public:
  // Runs over `comm`, a duplicate that only these algorithms use; the caller frees it. The
  // object holds no MPI resource, so it may be destroyed whenever (a failed communicator
  // leaves its MPI objects to MPI_Finalize, but frees this).
  explicit P2pCollectives(MPI_Comm comm);

  // Rank r's `out` (`block` elements) receives the reduction of every rank's block r of
  // `in` (size x block elements). op: Sum, Max or Min (a Mean runs as a Sum: the caller
  // divides). algorithm: Ring or RecursiveHalving.
  void reduce_scatter(CollectiveAlgorithm algorithm, const void* in, void* out, std::size_t block, DType dtype,
                      ReduceOp op);
  // Block r of `out` (size x block elements) receives rank r's `in`, which may be this
  // rank's block of `out` itself. algorithm: Ring or RecursiveDoubling.
  void all_gather(CollectiveAlgorithm algorithm, const void* in, void* out, std::size_t block, DType dtype);
  // Every rank's `data` receives the root's. algorithm: BinomialTree or Chain.
  void broadcast(CollectiveAlgorithm algorithm, void* data, std::size_t bytes, int root);

 private:
  void ring_reduce_scatter(const std::byte* in, std::byte* out, std::size_t block, DType dtype, ReduceOp op);
  void halving_reduce_scatter(const std::byte* in, std::byte* out, std::size_t block, DType dtype, ReduceOp op);
  void ring_all_gather(std::byte* out, std::size_t bytes);
  void doubling_all_gather(std::byte* out, std::size_t bytes);
  void binomial_broadcast(std::byte* data, std::size_t bytes, int root);
  void chain_broadcast(std::byte* data, std::size_t bytes, int root);

  // The folding of a non-power-of-two rank count (as in HalvingDoubling): this rank's rank
  // among the 2^k that run the algorithm, or -1 for an even rank that sits out.
  int folded_rank() const;
  int real_rank(int folded) const;    // the rank that runs as `folded`
  int first_block(int folded) const;  // the first block that `folded` stands for (blocks of size_ at the end)
  std::byte* scratch(int which, std::size_t bytes);

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  int pof2_ = 1;  // the largest power of two <= size_
  std::vector<std::byte> scratch_[3];
};

}  // namespace dtrain::dist::mpi
