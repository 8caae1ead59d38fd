#include "comm/mpi/algorithms/shm_collectives.h"

#include "comm/mpi/transport/mpi_runtime.h"
#include "comm/reduce_kernels.h"
#include "dtrain/core/error.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace dtrain::dist::mpi {

ShmCollectives::ShmCollectives(MPI_Comm comm, MPI_Comm host, std::size_t chunk_bytes) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_rank(host, &host_rank_);
  MPI_Comm_size(host, &host_size_);
  // A reduce-scatter chunk carries a piece of every rank's block: at least one element each.
  DTRAIN_CHECK(chunk_bytes >= 8 * static_cast<std::size_t>(host_size_),
               "shared-memory collectives: chunks of {} bytes cannot hold one 8-byte element for each of {} ranks",
               chunk_bytes, host_size_);
  layout_ = host_layout(comm, host);
  if (layout_.members.size() > 1) {
    check(MPI_Comm_split(comm, host_rank_ == 0 ? 0 : MPI_UNDEFINED, 0, &leaders_), "MPI_Comm_split");
    // The leaders' all-gather: each host's blocks, packed host after host.
    for (const std::vector<int>& members : layout_.members) {
      host_firsts_.push_back(host_firsts_.empty() ? 0 : host_firsts_.back() + host_counts_.back());
      host_counts_.push_back(static_cast<int>(members.size()));
    }
    const bool even = std::all_of(layout_.members.begin(), layout_.members.end(),
                                  [this](const std::vector<int>& m) { return m.size() == layout_.members[0].size(); });
    if (even) {
      const int host_index = layout_.host_of[static_cast<std::size_t>(rank_)];
      check(MPI_Comm_split(comm, host_rank_, host_index, &peers_), "MPI_Comm_split");
      check(MPI_Comm_set_errhandler(peers_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      peer_ring_ = std::make_unique<P2pCollectives>(peers_);
    }
  }
  if (host_size_ > 1) slots_ = std::make_unique<ShmSlots>(host, chunk_bytes);
}

ShmCollectives::~ShmCollectives() {
  slots_.reset();
  if (leaders_ != MPI_COMM_NULL) MPI_Comm_free(&leaders_);
  peer_ring_.reset();
  if (peers_ != MPI_COMM_NULL) MPI_Comm_free(&peers_);
}

void ShmCollectives::reduce_scatter(const void* in, void* out, std::size_t block, DType dtype, ReduceOp op) {
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  const std::size_t hosts = layout_.members.size();
  // Checked on every rank before any step, so that no rank waits for one that threw.
  DTRAIN_CHECK(even_hosts(),
               "shared-memory reduce_scatter across hosts needs the same number of ranks on every host, and "
               "this rank's host holds {} of the {} ranks on {} hosts",
               host_size_, layout_.host_of.size(), hosts);
  if (block == 0) return;  // alike on every rank (and an empty region_ has no data())
  if (hosts == 1) {
    host_reduce_scatter(src, dst, block, dtype, op);
    return;
  }
  region_.resize(hosts * block * dtype_size(dtype));
  host_reduce_scatter(src, region_.data(), block, dtype, op);
  peer_ring_->reduce_scatter(CollectiveAlgorithm::Ring, region_.data(), dst, block, dtype, op);
}

void ShmCollectives::copy_region(const std::byte* in, int j, std::size_t from, std::size_t len, std::size_t block,
                                 std::size_t esize, std::byte* to) const {
  while (len > 0) {
    const std::size_t h = from / block, at = from % block, n = std::min(len, block - at);
    const auto owner = static_cast<std::size_t>(layout_.members[h][static_cast<std::size_t>(j)]);
    std::memmove(to, in + (owner * block + at) * esize, n * esize);  // out may alias in's own block
    to += n * esize;
    from += n;
    len -= n;
  }
}

void ShmCollectives::host_reduce_scatter(const std::byte* src, std::byte* region, std::size_t block, DType dtype,
                                         ReduceOp op) {
  const std::size_t esize = dtype_size(dtype);
  const std::size_t size = layout_.members.size() * block;  // of a region
  if (!slots_) {
    copy_region(src, host_rank_, 0, size, block, esize, region);
    return;
  }
  ShmSlots& slots = *slots_;
  const int n = host_size_;
  // Each chunk carries one piece of every region (position j of the slot for host rank j).
  const std::size_t piece = slots.chunk_bytes() / esize / static_cast<std::size_t>(n);
  const std::size_t reduce_block = ShmSlots::kReduceBlockBytes / esize;
  for (std::size_t offset = 0; offset < size; offset += piece) {
    const std::size_t len = std::min(piece, size - offset);
    const std::size_t step = len * esize * static_cast<std::size_t>(n - 1);
    const std::uint64_t g = slots.begin_chunk(step);
    std::byte* mine = slots.buffer(host_rank_, g);
    for (int j = 0; j < n; ++j) {
      if (j != host_rank_) copy_region(src, j, offset, len, block, esize, mine + j * len * esize);
    }
    slots.publish(ShmSlots::kPosted, g);
    slots.wait_for(ShmSlots::kPosted, g, step);
    std::byte* acc = region + offset * esize;
    copy_region(src, host_rank_, offset, len, block, esize, acc);
    for (std::size_t b = 0; b < len; b += reduce_block) {
      const std::size_t m = std::min(reduce_block, len - b);
      for (int q = 0; q < n; ++q) {
        if (q != host_rank_)
          combine(acc + b * esize, acc + b * esize, slots.buffer(q, g) + (host_rank_ * len + b) * esize, m, dtype, op);
      }
    }
    slots.publish(ShmSlots::kFinished, g);
  }
}

void ShmCollectives::all_gather(const void* in, void* out, std::size_t block_bytes) {
  // Checked on every rank before any step: a leader that failed later would leave its
  // host's ranks waiting in the window.
  DTRAIN_CHECK(layout_.members.size() == 1 || block_bytes <= static_cast<std::size_t>(INT_MAX),
               "shared-memory all_gather across hosts: blocks of {} bytes exceed MPI's int count", block_bytes);
  auto* dst = static_cast<std::byte*>(out);
  std::byte* own = dst + static_cast<std::size_t>(rank_) * block_bytes;
  if (in != own) std::memmove(own, in, block_bytes);
  if (slots_) host_all_gather(dst, block_bytes);
  if (layout_.members.size() == 1) return;
  if (leaders_ != MPI_COMM_NULL) leaders_all_gather(dst, block_bytes);
  if (slots_) slots_->broadcast(dst, layout_.host_of.size() * block_bytes, 0);
}

void ShmCollectives::host_all_gather(std::byte* out, std::size_t block_bytes) {
  ShmSlots& slots = *slots_;
  const int n = host_size_;
  const std::vector<int>& members =
      layout_.members[static_cast<std::size_t>(layout_.host_of[static_cast<std::size_t>(rank_)])];
  const std::byte* own = out + static_cast<std::size_t>(rank_) * block_bytes;
  for (std::size_t offset = 0; offset < block_bytes; offset += slots.chunk_bytes()) {
    const std::size_t len = std::min(slots.chunk_bytes(), block_bytes - offset);
    const std::uint64_t g = slots.begin_chunk(len * static_cast<std::size_t>(n - 1));
    std::memcpy(slots.buffer(host_rank_, g), own + offset, len);
    slots.publish(ShmSlots::kPosted, g);
    // From the next rank on, so that the ranks do not all read one slot at once.
    for (int k = 1; k < n; ++k) {
      const int q = (host_rank_ + k) % n;
      slots.wait_for(ShmSlots::kPosted, g, len, q);
      const auto at = static_cast<std::size_t>(members[static_cast<std::size_t>(q)]) * block_bytes;
      std::memcpy(out + at + offset, slots.buffer(q, g), len);
    }
    slots.publish(ShmSlots::kFinished, g);
  }
}

// Each leader packs its host's blocks (in host-rank order) into its place of `packed_`,
// gathers every host's over the leaders with one block-sized datatype (counts in blocks,
// so any message MPI can address), and unpacks them to their ranks' places.
void ShmCollectives::leaders_all_gather(std::byte* out, std::size_t block_bytes) {
  if (block_bytes == 0) return;
  const std::size_t hosts = layout_.members.size();
  packed_.resize(layout_.host_of.size() * block_bytes);
  const auto mine = static_cast<std::size_t>(layout_.host_of[static_cast<std::size_t>(rank_)]);
  for (std::size_t k = 0; k < layout_.members[mine].size(); ++k) {
    std::memcpy(packed_.data() + (static_cast<std::size_t>(host_firsts_[mine]) + k) * block_bytes,
                out + static_cast<std::size_t>(layout_.members[mine][k]) * block_bytes, block_bytes);
  }
  MPI_Datatype block;
  check(MPI_Type_contiguous(static_cast<int>(block_bytes), MPI_BYTE, &block), "MPI_Type_contiguous");
  check(MPI_Type_commit(&block), "MPI_Type_commit");
  const int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, packed_.data(), host_counts_.data(),
                                host_firsts_.data(), block, leaders_);
  MPI_Type_free(&block);
  check(rc, "MPI_Allgatherv");
  for (std::size_t h = 0; h < hosts; ++h) {
    if (h == mine) continue;
    for (std::size_t k = 0; k < layout_.members[h].size(); ++k) {
      std::memcpy(out + static_cast<std::size_t>(layout_.members[h][k]) * block_bytes,
                  packed_.data() + (static_cast<std::size_t>(host_firsts_[h]) + k) * block_bytes, block_bytes);
    }
  }
}

void ShmCollectives::broadcast(void* data, std::size_t bytes, int root) {
  auto* p = static_cast<std::byte*>(data);
  const int root_host = layout_.host_of[static_cast<std::size_t>(root)];
  const bool root_here = layout_.host_of[static_cast<std::size_t>(rank_)] == root_host;
  // The root's host first (its leader then has the message), the leaders, the other hosts.
  if (root_here && slots_) slots_->broadcast(p, bytes, layout_.host_rank_of[static_cast<std::size_t>(root)]);
  if (leaders_ != MPI_COMM_NULL) {
    constexpr std::size_t kMaxPiece = std::size_t{1} << 30;  // MPI counts are ints
    for (std::size_t offset = 0; offset < bytes; offset += kMaxPiece) {
      const auto len = static_cast<int>(std::min(kMaxPiece, bytes - offset));
      check(MPI_Bcast(p + offset, len, MPI_BYTE, root_host, leaders_), "MPI_Bcast");
    }
  }
  if (!root_here && slots_) slots_->broadcast(p, bytes, 0);
}

}  // namespace dtrain::dist::mpi
