// Page-locked host memory, for uploads that do not wait (Tensor::to(cuda, true)) and the
// data loader's pin_memory. cudaHostAlloc is slow (it maps the pages for every device), so
// blocks are cached like device memory. A block in the cache is never still being read by a
// copy: an asynchronous upload keeps its source storage alive until the copy is done
// (CudaBackend::queue_upload), and only then is the block freed into the cache.
#include "dtrain/core/cuda/check.h"
#include "dtrain/core/cuda/device_guard.h"
#include "dtrain/core/environment.h"
#include "tensor/backend.h"
#include "tensor/caching_allocator.h"

#include <spdlog/spdlog.h>

namespace dtrain::detail {
namespace {

void* host_block(std::size_t bytes) {
  // On the process's device: a loader thread has none current, and would otherwise make a
  // context on device 0 (the guard leaves it on the home device, where it belongs).
  cuda::DeviceGuard guard(cuda::home_device());
  void* ptr = nullptr;
  const cudaError_t status = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  if (status != cudaSuccess) cuda::throw_error(status, "cudaHostAlloc");
  return ptr;
}

void free_host_block(void* ptr) {
  if (const cudaError_t status = cudaFreeHost(ptr); status != cudaSuccess) {
    cudaGetLastError();
    spdlog::warn("cuda: freeing a cached pinned block failed: {}", cudaGetErrorString(status));
  }
}

// Never destroyed, like the device backends: pinned tensors in static storage may be
// freed after the runtime is gone. Pinned memory cannot be swapped out, so the cache keeps
// no more than the CPU cache's limit.
CachingAllocator& cache() {
  static auto* c = new CachingAllocator(env::cpu_cache_limit_bytes(), host_block, free_host_block);
  return *c;
}

}  // namespace

void* pinned_allocate(std::size_t nbytes) {
  DTRAIN_CHECK(cuda::available(), "pinned host memory needs a CUDA device: {}", cuda::unavailable_reason());
  void* ptr = cache().allocate(nbytes);
  DTRAIN_CHECK(ptr != nullptr, "out of pinned host memory allocating {} bytes", nbytes);
  return ptr;
}

void pinned_deallocate(void* ptr, std::size_t nbytes) { cache().deallocate(ptr, nbytes); }

}  // namespace dtrain::detail
