// CUDA memory: device blocks through the shared block cache, and host transfers queued on
// the backend's stream. Plain transfers wait for the stream before returning, since the
// host buffers are ordinary pageable memory the caller may reuse at once. Uploads from
// pinned memory do not wait: on the compute stream (copy_from_host_async) or on a copy
// stream beside it (copy_from_host_beside, for Upload); either keeps its source alive
// until its event completes.
#include "dtrain/core/cuda/check.h"
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"

#include <spdlog/spdlog.h>

#include <limits>

namespace dtrain::detail {
namespace {

// On the current device (CudaBackend makes its device current around every call).
// nullptr when the device is out of memory, so that the cache can release and retry; any
// other failure (a broken context, say) throws with its own message.
void* device_block(std::size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it
    return nullptr;
  }
  if (status != cudaSuccess) cuda::throw_error(status, "cudaMalloc");
  return ptr;
}

// Only reached when the cache releases blocks (out of memory). Blocks in the cache may
// still be read by queued kernels, so the device finishes its work first; cudaFree would
// synchronise anyway, this makes the ordering explicit. A free must not throw (the cache
// may free from deallocate, which tensor destructors call), so a failure is logged.
void free_device_block(void* ptr) {
  cudaError_t status = cudaDeviceSynchronize();
  if (status == cudaSuccess) status = cudaFree(ptr);
  if (status != cudaSuccess) {
    cudaGetLastError();
    spdlog::warn("cuda: freeing a cached device block failed: {}", cudaGetErrorString(status));
  }
}

}  // namespace

// The cache has no limit: device memory is ours alone, and the cache gives every block
// back and retries when an allocation fails.
CudaBackend::CudaBackend(int device)
    : device_(device), cache_(std::numeric_limits<std::size_t>::max(), device_block, free_device_block) {
  cuda::DeviceGuard guard(device_);
  // Non-blocking: the legacy default stream, which other libraries may use, does not
  // serialise with ours.
  DTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

void* CudaBackend::allocate(std::size_t nbytes) {
  cuda::DeviceGuard guard(device_);
  void* ptr = cache_.allocate(nbytes);
  DTRAIN_CHECK(ptr != nullptr, "cuda:{}: out of device memory allocating {} bytes", device_, nbytes);
  return ptr;
}

// Returns the block to the cache without waiting for the stream: see cuda_backend.h.
void CudaBackend::deallocate(void* ptr, std::size_t nbytes) { cache_.deallocate(ptr, nbytes); }

MemoryStats CudaBackend::memory_stats() const { return cache_.stats(); }

void CudaBackend::reset_peak_memory() { cache_.reset_peak(); }

void CudaBackend::copy_to_host(const void* device_src, void* host_dst, std::size_t nbytes) {
  if (nbytes == 0) return;
  cuda::DeviceGuard guard(device_);
  DTRAIN_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, nbytes, cudaMemcpyDeviceToHost, stream_));
  DTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  raise_index_fault();
}

void CudaBackend::copy_from_host(const void* host_src, void* device_dst, std::size_t nbytes) {
  if (nbytes == 0) return;
  cuda::DeviceGuard guard(device_);
  DTRAIN_CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, nbytes, cudaMemcpyHostToDevice, stream_));
  DTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  raise_index_fault();
}

void CudaBackend::copy_from_host_async(const void* host_src, void* device_dst, std::size_t nbytes,
                                       std::shared_ptr<const void> keep_alive) {
  if (nbytes == 0) return;
  cuda::DeviceGuard guard(device_);
  queue_upload(host_src, device_dst, nbytes, std::move(keep_alive), stream_);
}

cudaStream_t CudaBackend::copy_stream() {
  std::call_once(copy_once_,
                 [&] { DTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking)); });
  return copy_stream_;
}

std::shared_ptr<void> CudaBackend::copy_from_host_beside(const void* host_src, void* device_dst, std::size_t nbytes,
                                                         std::shared_ptr<const void> keep_alive) {
  cuda::DeviceGuard guard(device_);
  const cudaStream_t copies = copy_stream();
  // device_dst comes from the block cache, where a block may still be used by kernels
  // queued on stream_: the copy starts after them. Kernels queued later are not waited for.
  cudaEvent_t queued = nullptr;
  DTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&queued, cudaEventDisableTiming));
  cudaError_t status = cudaEventRecord(queued, stream_);
  if (status == cudaSuccess) status = cudaStreamWaitEvent(copies, queued, 0);
  cudaEventDestroy(queued);  // allowed at once: the wait is already queued
  if (status != cudaSuccess) cuda::throw_error(status, "ordering an upload after the compute stream");
  if (nbytes == 0) return nullptr;
  return queue_upload(host_src, device_dst, nbytes, std::move(keep_alive), copies);
}

void CudaBackend::wait_for(const std::shared_ptr<void>& event) {
  if (!event) return;
  cuda::DeviceGuard guard(device_);
  DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(event.get()), 0));
}

std::shared_ptr<CUevent_st> CudaBackend::queue_upload(const void* host_src, void* device_dst, std::size_t nbytes,
                                                      std::shared_ptr<const void> keep_alive, cudaStream_t on) {
  release_finished_uploads(false);
  // The event first: once the copy is queued, a failure must not release the source early.
  cudaEvent_t created = nullptr;
  DTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&created, cudaEventDisableTiming));
  std::shared_ptr<CUevent_st> done(created, [](cudaEvent_t e) { cudaEventDestroy(e); });
  if (const cudaError_t status = cudaMemcpyAsync(device_dst, host_src, nbytes, cudaMemcpyHostToDevice, on);
      status != cudaSuccess) {
    cuda::throw_error(status, "cudaMemcpyAsync (an asynchronous upload)");
  }
  if (const cudaError_t status = cudaEventRecord(done.get(), on); status != cudaSuccess) {
    // The copy may still be queued: wait for it before the source can go.
    cudaStreamSynchronize(on);
    cuda::throw_error(status, "cudaEventRecord");
  }
  std::lock_guard lock(uploads_mutex_);
  uploads_.push_back({done, std::move(keep_alive)});
  return done;
}

// Uploads on the two streams complete in no common order: every entry is checked.
void CudaBackend::release_finished_uploads(bool wait) {
  std::lock_guard lock(uploads_mutex_);
  for (auto it = uploads_.begin(); it != uploads_.end();) {
    const cudaError_t status = wait ? cudaEventSynchronize(it->done.get()) : cudaEventQuery(it->done.get());
    if (status == cudaErrorNotReady) {
      ++it;
      continue;
    }
    if (status != cudaSuccess) cuda::throw_error(status, "cudaEventQuery (an asynchronous upload)");
    it = uploads_.erase(it);
  }
}

void CudaBackend::synchronize() {
  cuda::DeviceGuard guard(device_);
  DTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (copy_stream_ != nullptr) DTRAIN_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  release_finished_uploads(true);
  raise_index_fault();
}

}  // namespace dtrain::detail
