// The CPU block cache: freed blocks come back for the same rounded size, the limit holds,
// and release() returns everything to the system.
#include "tensor/caching_allocator.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>

namespace dtrain::detail {
namespace {

// Counts what reaches the system allocator.
struct SystemCounts {
  static inline int allocs = 0, frees = 0;
  static void* alloc(std::size_t bytes) {
    ++allocs;
    return std::malloc(bytes);
  }
  static void free(void* p) {
    ++frees;
    std::free(p);
  }
  SystemCounts() { allocs = frees = 0; }
};

}  // namespace

TEST_CASE("caching allocator reuses a freed block of the same rounded size", "[cpu][tensor]") {
  SystemCounts counts;
  CachingAllocator cache(1 << 20, SystemCounts::alloc, SystemCounts::free);
  void* a = cache.allocate(1000);
  cache.deallocate(a, 1000);
  CHECK(cache.cached_bytes() == CachingAllocator::rounded(1000));
  CHECK(cache.allocate(1010) == a);  // same 64-byte class
  CHECK(SystemCounts::allocs == 1);
  void* b = cache.allocate(5000);  // another class: a fresh block
  CHECK(b != a);
  CHECK(SystemCounts::allocs == 2);
  cache.deallocate(a, 1010);
  cache.deallocate(b, 5000);
  cache.release();
  CHECK(cache.cached_bytes() == 0);
  CHECK(SystemCounts::frees == 2);
}

TEST_CASE("caching allocator frees blocks beyond its limit", "[cpu][tensor]") {
  SystemCounts counts;
  CachingAllocator cache(8192, SystemCounts::alloc, SystemCounts::free);
  void* a = cache.allocate(8192);
  void* b = cache.allocate(8192);
  cache.deallocate(a, 8192);  // fills the cache
  cache.deallocate(b, 8192);  // over the limit: back to the system
  CHECK(cache.cached_bytes() == 8192);
  CHECK(SystemCounts::frees == 1);
  CachingAllocator off(0, SystemCounts::alloc, SystemCounts::free);
  off.deallocate(off.allocate(64), 64);
  CHECK(SystemCounts::frees == 2);
}

TEST_CASE("caching allocator rounds to cache lines, then to pages", "[cpu][tensor]") {
  CHECK(CachingAllocator::rounded(0) == 64);
  CHECK(CachingAllocator::rounded(1) == 64);
  CHECK(CachingAllocator::rounded(65) == 128);
  CHECK(CachingAllocator::rounded(64 << 10) == (64 << 10));
  CHECK(CachingAllocator::rounded((64 << 10) + 1) == (64 << 10) + 4096);
}

TEST_CASE("caching allocator releases its cache and retries when the system is out of memory", "[cpu][tensor]") {
  // The system "has room" for one block at a time.
  static int live = 0;
  static int frees = 0;
  live = frees = 0;
  auto alloc = [](std::size_t bytes) -> void* { return live ? nullptr : (++live, std::malloc(bytes)); };
  auto release = [](void* p) { --live, ++frees, std::free(p); };
  CachingAllocator cache(1 << 20, alloc, release);
  cache.deallocate(cache.allocate(128), 128);  // cached, still held from the system
  void* big = cache.allocate(4096);            // fails once, frees the cached block, succeeds
  REQUIRE(big != nullptr);
  CHECK(frees == 1);
  CHECK(cache.allocate(4096) == nullptr);  // nothing left to release: the caller reports it
  cache.deallocate(big, 4096);
}

}  // namespace dtrain::detail
