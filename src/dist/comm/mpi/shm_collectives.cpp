#include "dist/comm/mpi/shm_collectives.h"

#include "dist/comm/reduce_kernels.h"
#include "dtrain/core/error.h"

#include <algorithm>
#include <cstring>

namespace dtrain::dist::mpi {
namespace {
// The reduction runs in blocks that stay in L1 while every rank's copy is combined in.
constexpr std::size_t kBlockBytes = 16 << 10;
}  // namespace

ShmCollectives::ShmCollectives(MPI_Comm host, std::size_t chunk_bytes) {
  MPI_Comm_rank(host, &rank_);
  MPI_Comm_size(host, &size_);
  // A reduce-scatter chunk carries a piece of every rank's block: at least one element each.
  DTRAIN_CHECK(chunk_bytes >= 8 * static_cast<std::size_t>(size_),
               "shared-memory collectives: chunks of {} bytes cannot hold one 8-byte element for each of {} ranks",
               chunk_bytes, size_);
  if (size_ > 1) slots_ = std::make_unique<ShmSlots>(host, chunk_bytes);
}

void ShmCollectives::reduce_scatter(const void* in, void* out, std::size_t block, DType dtype, ReduceOp op) {
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  const std::size_t esize = dtype_size(dtype);
  if (!slots_) {
    std::memmove(dst, src, block * esize);
    return;
  }
  ShmSlots& slots = *slots_;
  const int n = size_;
  // Each chunk carries one piece of every block (position j of the slot for rank j).
  const std::size_t piece = slots.chunk_bytes() / esize / static_cast<std::size_t>(n);
  const std::size_t reduce_block = kBlockBytes / esize;
  for (std::size_t offset = 0; offset < block; offset += piece) {
    const std::size_t len = std::min(piece, block - offset);
    const std::size_t step = len * esize * static_cast<std::size_t>(n - 1);
    const std::uint64_t g = slots.begin_chunk(step);
    std::byte* mine = slots.buffer(rank_, g);
    for (int j = 0; j < n; ++j) {
      if (j == rank_) continue;
      std::memcpy(mine + j * len * esize, src + (j * block + offset) * esize, len * esize);
    }
    slots.publish(ShmSlots::kPosted, g);
    slots.wait_for(ShmSlots::kPosted, g, step);
    std::byte* acc = dst + offset * esize;
    std::memmove(acc, src + (rank_ * block + offset) * esize, len * esize);
    for (std::size_t b = 0; b < len; b += reduce_block) {
      const std::size_t m = std::min(reduce_block, len - b);
      for (int q = 0; q < n; ++q) {
        if (q != rank_)
          combine(acc + b * esize, acc + b * esize, slots.buffer(q, g) + (rank_ * len + b) * esize, m, dtype, op);
      }
    }
    slots.publish(ShmSlots::kFinished, g);
  }
}

void ShmCollectives::all_gather(const void* in, void* out, std::size_t block_bytes) {
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  std::byte* own = dst + rank_ * block_bytes;
  if (src != own) std::memmove(own, src, block_bytes);
  if (!slots_) return;
  ShmSlots& slots = *slots_;
  const int n = size_;
  for (std::size_t offset = 0; offset < block_bytes; offset += slots.chunk_bytes()) {
    const std::size_t len = std::min(slots.chunk_bytes(), block_bytes - offset);
    const std::uint64_t g = slots.begin_chunk(len * static_cast<std::size_t>(n - 1));
    std::memcpy(slots.buffer(rank_, g), own + offset, len);
    slots.publish(ShmSlots::kPosted, g);
    // From the next rank on, so that the ranks do not all read one slot at once.
    for (int k = 1; k < n; ++k) {
      const int q = (rank_ + k) % n;
      slots.wait_for(ShmSlots::kPosted, g, len, q);
      std::memcpy(dst + q * block_bytes + offset, slots.buffer(q, g), len);
    }
    slots.publish(ShmSlots::kFinished, g);
  }
}

void ShmCollectives::broadcast(void* data, std::size_t bytes, int root) {
  if (!slots_) return;
  ShmSlots& slots = *slots_;
  auto* p = static_cast<std::byte*>(data);
  for (std::size_t offset = 0; offset < bytes; offset += slots.chunk_bytes()) {
    const std::size_t len = std::min(slots.chunk_bytes(), bytes - offset);
    const std::uint64_t g = slots.begin_chunk(len, rank_ == root);
    if (rank_ == root) {
      std::memcpy(slots.buffer(root, g), p + offset, len);
      slots.publish(ShmSlots::kPosted, g);
    } else {
      slots.wait_for(ShmSlots::kPosted, g, len, root);
      std::memcpy(p + offset, slots.buffer(root, g), len);
    }
    slots.publish(ShmSlots::kFinished, g);
  }
}

}  // namespace dtrain::dist::mpi
