// CPU memory: 64-byte aligned blocks (a full cache line and AVX-512 vector) through a
// cache of freed blocks, and plain memcpy transfers, since CPU memory is host memory.
// Under AddressSanitizer every block goes straight back to the system, so that a use
// after free is still caught.
#include "dtrain/core/environment.h"
#include "tensor/caching_allocator.h"
#include "tensor/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace dtrain::detail {
namespace {
constexpr std::size_t kAlignment = 64;

// bytes is a CachingAllocator::rounded() size, a multiple of the alignment as
// aligned_alloc requires.
void* aligned_block(std::size_t bytes) { return std::aligned_alloc(kAlignment, bytes); }

std::size_t cache_limit() {
#if defined(__SANITIZE_ADDRESS__)
  return 0;
#else
  return env::cpu_cache_limit_bytes();
#endif
}

CachingAllocator& block_cache() {
  // Never destroyed: tensors in static storage may be freed after it would have been.
  // The limit is read once, here: reading it costs getenv calls and a sysinfo system call,
  // and every allocation and free comes through this function.
  static auto* cache = new CachingAllocator(cache_limit(), aligned_block, std::free);
  return *cache;
}
}  // namespace

void* CpuBackend::allocate(std::size_t nbytes) {
  void* ptr = block_cache().allocate(nbytes);
  DTRAIN_CHECK(ptr != nullptr, "out of CPU memory allocating {} bytes", nbytes);
  return ptr;
}

void CpuBackend::deallocate(void* ptr, std::size_t nbytes) { block_cache().deallocate(ptr, nbytes); }

MemoryStats CpuBackend::memory_stats() const { return block_cache().stats(); }

void CpuBackend::reset_peak_memory() { block_cache().reset_peak(); }

void CpuBackend::copy_to_host(const void* src, void* dst, std::size_t nbytes) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}

void CpuBackend::copy_from_host(const void* src, void* dst, std::size_t nbytes) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}

Backend& cpu_backend() {
  static CpuBackend instance;
  return instance;
}

}  // namespace dtrain::detail
