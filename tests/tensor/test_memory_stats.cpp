// Memory statistics: the block cache counts what it hands out by rounded size, keeps the
// high-water mark until reset, and memory_stats(cpu) reports the same for tensors.
#include "dtrain/core/environment.h"
#include "dtrain/tensor/memory_stats.h"
#include "dtrain/tensor/tensor.h"
#include "tensor/caching_allocator.h"

#include <catch2/catch.hpp>

#include <cstdlib>

namespace dtrain {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A 1 MiB f32 tensor: a whole number of pages, so its block is exactly 1 MiB.
Tensor one_mib() { return Tensor::empty({256, 1024}, {DType::f32}); }

// The CPU cache's limit: zero under AddressSanitizer (src/tensor/cpu/memory.cpp), where a
// freed block goes straight back to the system, as with DTRAIN_CPU_CACHE_MB=0.
std::size_t cpu_cache_limit() {
#if defined(__SANITIZE_ADDRESS__)
  return 0;
#else
  return env::cpu_cache_limit_bytes();
#endif
}

}  // namespace

TEST_CASE("caching allocator counts blocks in use by rounded size, and their peak", "[cpu][tensor]") {
  detail::CachingAllocator cache(1 << 20, std::malloc, std::free);
  void* a = cache.allocate(1000);  // a fresh block: the slow path counts too
  void* b = cache.allocate(8192);
  CHECK(cache.stats().in_use_bytes == 1024 + 8192);
  cache.deallocate(b, 8192);
  MemoryStats s = cache.stats();
  CHECK(s.in_use_bytes == 1024);
  CHECK(s.peak_bytes == 1024 + 8192);
  CHECK(s.cached_bytes == 8192);

  void* again = cache.allocate(8150);  // rounds to 8192: the cached block, in use again
  CHECK(again == b);
  s = cache.stats();
  CHECK(s.in_use_bytes == 1024 + 8192);
  CHECK(s.cached_bytes == 0);

  cache.deallocate(again, 8150);
  cache.reset_peak();
  CHECK(cache.stats().peak_bytes == 1024);
  cache.deallocate(a, 1000);
  s = cache.stats();
  CHECK(s.in_use_bytes == 0);
  CHECK(s.peak_bytes == 1024);  // a free does not lower the mark
  CHECK(s.cached_bytes == 1024 + 8192);
}

TEST_CASE("caching allocator uncounts blocks freed past its limit, and counts no failed allocation",
          "[cpu][tensor]") {
  static bool full = false;
  full = false;
  auto alloc = [](std::size_t bytes) { return full ? nullptr : std::malloc(bytes); };
  detail::CachingAllocator cache(0, alloc, std::free);  // caches nothing
  void* a = cache.allocate(4096);
  cache.deallocate(a, 4096);  // straight back to the system
  CHECK(cache.stats().in_use_bytes == 0);
  CHECK(cache.stats().cached_bytes == 0);
  full = true;
  CHECK(cache.allocate(4096) == nullptr);
  CHECK(cache.stats().in_use_bytes == 0);
  CHECK(cache.stats().peak_bytes == 4096);
}

TEST_CASE("memory_stats counts a CPU tensor's block while it lives", "[cpu][tensor]") {
  const Device cpu = Device::cpu();
  const MemoryStats before = memory_stats(cpu);
  MemoryStats held;
  {
    const Tensor t = one_mib();
    CHECK(memory_stats(cpu).in_use_bytes == before.in_use_bytes + kMiB);
    // 4000 bytes are served by a 4032-byte block (64-byte granularity).
    const Tensor odd = Tensor::empty({1000}, {DType::f32});
    held = memory_stats(cpu);
    CHECK(held.in_use_bytes == before.in_use_bytes + kMiB + 4032);
  }
  // Compared with `held`, not `before`: the blocks may have come from the cache.
  const MemoryStats after = memory_stats(cpu);
  CHECK(after.in_use_bytes == before.in_use_bytes);
  const bool cached = held.cached_bytes + kMiB + 4032 <= cpu_cache_limit();
  CHECK(after.cached_bytes == held.cached_bytes + (cached ? kMiB + 4032 : 0));

  // Taken from the cache or not, the block is in use again.
  const Tensor reused = one_mib();
  CHECK(memory_stats(cpu).in_use_bytes == before.in_use_bytes + kMiB);
  CHECK(memory_stats(cpu).cached_bytes == after.cached_bytes - (cached ? kMiB : 0));
}

TEST_CASE("memory_stats keeps the CPU peak until reset_peak_memory", "[cpu][tensor]") {
  const Device cpu = Device::cpu();
  reset_peak_memory(cpu);
  const std::size_t base = memory_stats(cpu).in_use_bytes;
  CHECK(memory_stats(cpu).peak_bytes == base);
  Tensor a = one_mib();
  {
    const Tensor b = Tensor::empty({2, 256, 1024}, {DType::f32});  // 2 MiB
  }
  MemoryStats s = memory_stats(cpu);
  CHECK(s.in_use_bytes == base + kMiB);
  CHECK(s.peak_bytes == base + 3 * kMiB);

  reset_peak_memory(cpu);
  CHECK(memory_stats(cpu).peak_bytes == base + kMiB);
  a = Tensor();
  s = memory_stats(cpu);
  CHECK(s.in_use_bytes == base);
  CHECK(s.peak_bytes == base + kMiB);
}

}  // namespace dtrain
