#include "comm/mpi/algorithms/p2p_collectives.h"

#include "comm/backoff.h"
#include "comm/mpi/transport/byte_messages.h"
#include "comm/mpi/transport/mpi_runtime.h"
#include "comm/mpi/transport/request_wait.h"
#include "comm/reduce_kernels.h"

#include <algorithm>
#include <cstring>

namespace dtrain::dist::mpi {
namespace {
// The chain's chunks: smaller than the rings', since a chunk waits at every rank of the
// chain before the last one sees it (the pipeline's fill is (p-2) chunks long).
constexpr std::size_t kChainChunk = std::size_t{256} << 10;
}  // namespace

P2pCollectives::P2pCollectives(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  while (pof2_ * 2 <= size_) pof2_ *= 2;
}

std::byte* P2pCollectives::scratch(int which, std::size_t bytes) {
  std::vector<std::byte>& s = scratch_[which];
  if (s.size() < bytes) s.resize(bytes);
  return s.data();
}

int P2pCollectives::folded_rank() const {
  const int rem = size_ - pof2_;
  if (rank_ >= 2 * rem) return rank_ - rem;
  return rank_ % 2 == 1 ? rank_ / 2 : -1;
}

int P2pCollectives::real_rank(int folded) const {
  const int rem = size_ - pof2_;
  return folded < rem ? 2 * folded + 1 : folded + rem;
}

int P2pCollectives::first_block(int folded) const {
  const int rem = size_ - pof2_;
  return folded < rem ? 2 * folded : folded + rem;  // pof2_ maps to size_
}

// ---- reduce-scatter ----------------------------------------------------------------

void P2pCollectives::reduce_scatter(CollectiveAlgorithm algorithm, const void* in, void* out, std::size_t block,
                                    DType dtype, ReduceOp op) {
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  if (size_ == 1 || block == 0) {
    std::memmove(dst, src, block * dtype_size(dtype));  // out may be in itself
    return;
  }
  switch (algorithm) {
    case CollectiveAlgorithm::Ring: ring_reduce_scatter(src, dst, block, dtype, op); return;
    case CollectiveAlgorithm::RecursiveHalving: halving_reduce_scatter(src, dst, block, dtype, op); return;
    default: DTRAIN_FAIL("reduce_scatter: {} is not a reduce-scatter algorithm", collective_algorithm_name(algorithm));
  }
}

// Step s sends the partial sum of block r-s-1 to the right and receives that of block
// r-s-2 from the left, adding this rank's own block to it; after n-1 steps the block
// received last is r's own, complete. The partial sums alternate between two buffers: one
// is being sent while the next is computed.
void P2pCollectives::ring_reduce_scatter(const std::byte* in, std::byte* out, std::size_t block, DType dtype,
                                         ReduceOp op) {
  const int n = size_;
  const std::size_t bytes = block * dtype_size(dtype);
  const int right = (rank_ + 1) % n, left = (rank_ - 1 + n) % n;
  std::byte* partial[2] = {scratch(0, bytes), scratch(1, bytes)};
  std::vector<MPI_Request> sends;
  for (int s = 0; s < n - 1; ++s) {
    const auto send_block = static_cast<std::size_t>((rank_ - s - 1 + 2 * n) % n);
    const auto recv_block = static_cast<std::size_t>((rank_ - s - 2 + 2 * n) % n);
    // MPI only reads a send buffer: the const_cast lets one helper post both directions.
    std::byte* from = s == 0 ? const_cast<std::byte*>(in) + send_block * bytes : partial[(s - 1) % 2];
    std::byte* into = s == n - 2 ? out : partial[s % 2];
    sends.clear();
    post_chunks(true, from, bytes, kRingChunkBytes, right, comm_, sends);
    receive_combining(into, in + recv_block * bytes, block, dtype, op, left, comm_, scratch_[2]);
    wait_transfer(sends, bytes, "ring reduce-scatter (send)");
  }
}

// Each step halves the range of (folded) ranks this rank belongs to: it keeps the half its
// rank is in, sends the other half of its partial sums to the partner in that other half,
// and reduces the partner's copy of the kept half into its own. The first step reads the
// input itself; later ones the partial sums in `work`.
void P2pCollectives::halving_reduce_scatter(const std::byte* in, std::byte* out, std::size_t block, DType dtype,
                                            ReduceOp op) {
  const std::size_t esize = dtype_size(dtype), bytes = block * esize, total = bytes * static_cast<std::size_t>(size_);
  const std::size_t count = block * static_cast<std::size_t>(size_);
  const int me = folded_rank();
  const bool folds = rank_ < 2 * (size_ - pof2_);
  std::byte* work = scratch(0, total);
  const std::byte* from = in;
  if (folds && me < 0) {
    exchange(in, total, nullptr, 0, rank_ + 1, comm_, "recursive halving reduce-scatter (fold)");
  } else if (folds) {
    std::byte* other = scratch(1, total);
    exchange(nullptr, 0, other, total, rank_ - 1, comm_, "recursive halving reduce-scatter (fold)");
    combine(work, other, in, count, dtype, op);
    from = work;
  }
  if (me >= 0) {
    auto range_of = [&](int lo, int hi) {
      return std::pair{static_cast<std::size_t>(first_block(lo)) * bytes,
                       static_cast<std::size_t>(first_block(hi)) * bytes};
    };
    int lo = 0, hi = pof2_;
    for (int half = pof2_ / 2; half >= 1; half /= 2) {
      const int mid = lo + half;
      const bool low = me < mid;
      const auto [keep_begin, keep_end] = low ? range_of(lo, mid) : range_of(mid, hi);
      const auto [give_begin, give_end] = low ? range_of(mid, hi) : range_of(lo, mid);
      std::byte* other = scratch(1, keep_end - keep_begin);
      exchange(from + give_begin, give_end - give_begin, other, keep_end - keep_begin,
               real_rank(low ? me + half : me - half), comm_, "recursive halving reduce-scatter");
      combine(work + keep_begin, from + keep_begin, other, (keep_end - keep_begin) / esize, dtype, op);
      from = work;
      (low ? hi : lo) = mid;
    }
    // work now holds the reduced blocks this folded rank stands for: its own, and the even
    // partner's first when it folded one.
    if (folds)
      exchange(work + static_cast<std::size_t>(rank_ - 1) * bytes, bytes, nullptr, 0, rank_ - 1, comm_,
               "recursive halving reduce-scatter (unfold)");
    std::memcpy(out, work + static_cast<std::size_t>(rank_) * bytes, bytes);
  } else {
    exchange(nullptr, 0, out, bytes, rank_ + 1, comm_, "recursive halving reduce-scatter (unfold)");
  }
}

// ---- all-gather ----------------------------------------------------------------------

void P2pCollectives::all_gather(CollectiveAlgorithm algorithm, const void* in, void* out, std::size_t block,
                                DType dtype) {
  const std::size_t bytes = block * dtype_size(dtype);
  auto* base = static_cast<std::byte*>(out);
  std::byte* mine = base + static_cast<std::size_t>(rank_) * bytes;
  if (in != mine) std::memcpy(mine, in, bytes);
  if (size_ == 1 || bytes == 0) return;
  switch (algorithm) {
    case CollectiveAlgorithm::Ring: ring_all_gather(base, bytes); return;
    case CollectiveAlgorithm::RecursiveDoubling: doubling_all_gather(base, bytes); return;
    default: DTRAIN_FAIL("all_gather: {} is not an all-gather algorithm", collective_algorithm_name(algorithm));
  }
}

// Step s passes block r-s to the right and receives block r-s-1 from the left, straight
// into place.
void P2pCollectives::ring_all_gather(std::byte* out, std::size_t bytes) {
  const int n = size_;
  const int right = (rank_ + 1) % n, left = (rank_ - 1 + n) % n;
  std::vector<MPI_Request> requests;
  for (int s = 0; s < n - 1; ++s) {
    requests.clear();
    post_chunks(false, out + static_cast<std::size_t>((rank_ - s - 1 + 2 * n) % n) * bytes, bytes, kRingChunkBytes,
                left, comm_, requests);
    post_chunks(true, out + static_cast<std::size_t>((rank_ - s + 2 * n) % n) * bytes, bytes, kRingChunkBytes, right,
                comm_, requests);
    wait_transfer(requests, 2 * bytes, "ring all-gather");
  }
}

// Step k swaps the 2^k folded ranks' blocks this rank holds for its partner's 2^k, the
// adjacent group; a folded pair's two blocks travel together.
void P2pCollectives::doubling_all_gather(std::byte* out, std::size_t bytes) {
  const int me = folded_rank();
  const bool folds = rank_ < 2 * (size_ - pof2_);
  const std::size_t total = bytes * static_cast<std::size_t>(size_);
  auto at = [&](int folded) { return static_cast<std::size_t>(first_block(folded)) * bytes; };
  if (folds) {
    std::byte* even = out + static_cast<std::size_t>(rank_ - (me < 0 ? 0 : 1)) * bytes;
    if (me < 0) exchange(even, bytes, nullptr, 0, rank_ + 1, comm_, "recursive doubling all-gather (fold)");
    else exchange(nullptr, 0, even, bytes, rank_ - 1, comm_, "recursive doubling all-gather (fold)");
  }
  if (me >= 0) {
    for (int group = 1; group < pof2_; group *= 2) {
      const int mine = me & ~(group - 1), theirs = mine ^ group;
      exchange(out + at(mine), at(mine + group) - at(mine), out + at(theirs), at(theirs + group) - at(theirs),
               real_rank(me ^ group), comm_, "recursive doubling all-gather");
    }
  }
  if (folds) {
    if (me < 0) exchange(nullptr, 0, out, total, rank_ + 1, comm_, "recursive doubling all-gather (unfold)");
    else exchange(out, total, nullptr, 0, rank_ - 1, comm_, "recursive doubling all-gather (unfold)");
  }
}

// ---- broadcast -------------------------------------------------------------------------

void P2pCollectives::broadcast(CollectiveAlgorithm algorithm, void* data, std::size_t bytes, int root) {
  if (size_ == 1 || bytes == 0) return;
  auto* base = static_cast<std::byte*>(data);
  switch (algorithm) {
    case CollectiveAlgorithm::BinomialTree: binomial_broadcast(base, bytes, root); return;
    case CollectiveAlgorithm::Chain: chain_broadcast(base, bytes, root); return;
    default: DTRAIN_FAIL("broadcast: {} is not a broadcast algorithm", collective_algorithm_name(algorithm));
  }
}

// Ranks counted from the root (v): v receives from v minus its lowest set bit, then sends
// to v + 2^j for every 2^j below that bit, largest first (the subtree that has the most to
// pass on starts first).
void P2pCollectives::binomial_broadcast(std::byte* data, std::size_t bytes, int root) {
  const int n = size_, v = (rank_ - root + n) % n;
  auto real = [&](int relative) { return (relative + root) % n; };
  int bit = 1;
  for (; bit < n; bit *= 2) {
    if (v & bit) {
      exchange(nullptr, 0, data, bytes, real(v - bit), comm_, "binomial broadcast (receive)");
      break;
    }
  }
  std::vector<MPI_Request> sends;
  for (bit /= 2; bit >= 1; bit /= 2) {
    if (v + bit < n) post_send(data, bytes, real(v + bit), comm_, sends);
  }
  wait_transfer(sends, bytes, "binomial broadcast (send)");
}

// Ranks counted from the root: each receives every chunk from the one before it and
// forwards it to the one after it while the next chunk arrives.
void P2pCollectives::chain_broadcast(std::byte* data, std::size_t bytes, int root) {
  const int n = size_, v = (rank_ - root + n) % n;
  const std::size_t chunks = (bytes + kChainChunk - 1) / kChainChunk;
  std::vector<MPI_Request> receives, sends;
  if (v > 0) post_chunks(false, data, bytes, kChainChunk, (rank_ - 1 + n) % n, comm_, receives);
  for (std::size_t k = 0; k < chunks; ++k) {
    const std::size_t length = std::min(kChainChunk, bytes - k * kChainChunk);
    if (v > 0) wait_all(&receives[k], 1, "chain broadcast (receive)", spin_for_network(length));
    if (v + 1 < n) post_chunks(true, data + k * kChainChunk, length, kChainChunk, (rank_ + 1) % n, comm_, sends);
  }
  wait_transfer(sends, bytes, "chain broadcast (send)");
}

}  // namespace dtrain::dist::mpi
