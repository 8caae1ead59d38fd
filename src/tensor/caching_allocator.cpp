#include "tensor/caching_allocator.h"

#include <algorithm>

namespace dtrain::detail {

std::size_t CachingAllocator::rounded(std::size_t bytes) {
  // 64 bytes (a cache line) up to 64 KB, then 4 KB pages.
  const std::size_t unit = bytes <= (std::size_t{64} << 10) ? 64 : 4096;
  return bytes == 0 ? unit : (bytes + unit - 1) / unit * unit;
}

void* CachingAllocator::allocate(std::size_t bytes) {
  const std::size_t size = rounded(bytes);
  {
    std::lock_guard lock(mutex_);
    auto it = free_blocks_.find(size);
    if (it != free_blocks_.end() && !it->second.empty()) {
      void* ptr = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      count_in_use(size);
      return ptr;
    }
  }
  void* ptr = alloc_(size);
  if (ptr == nullptr) {
    release();  // cached blocks of other sizes may make room
    ptr = alloc_(size);
    if (ptr == nullptr) return nullptr;
  }
  std::lock_guard lock(mutex_);
  count_in_use(size);
  return ptr;
}

void CachingAllocator::count_in_use(std::size_t size) {
  in_use_ += size;
  peak_ = std::max(peak_, in_use_);
}

void CachingAllocator::deallocate(void* ptr, std::size_t bytes) {
  if (ptr == nullptr) return;
  const std::size_t size = rounded(bytes);
  {
    std::lock_guard lock(mutex_);
    in_use_ -= size;
    if (cached_ + size <= limit_) {
      free_blocks_[size].push_back(ptr);
      cached_ += size;
      return;
    }
  }
  free_(ptr);
}

void CachingAllocator::release() {
  std::unordered_map<std::size_t, std::vector<void*>> blocks;
  {
    std::lock_guard lock(mutex_);
    blocks.swap(free_blocks_);
    cached_ = 0;
  }
  for (auto& [size, ptrs] : blocks) {
    for (void* p : ptrs) free_(p);
  }
}

std::size_t CachingAllocator::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return {.in_use_bytes = in_use_, .peak_bytes = peak_, .cached_bytes = cached_};
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_ = in_use_;
}

}  // namespace dtrain::detail
