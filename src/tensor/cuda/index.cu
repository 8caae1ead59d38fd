// CUDA indexing and joining, with the semantics of cpu/index.cpp. Tensors are made
// contiguous and seen as (outer, size along dim, inner); each kernel runs one thread per
// element of its output (index_select, gather) or of its source (index_add, scatter_add),
// which finds its (outer, position, inner) coordinates by division.
//
// Index values are range-checked by the kernels themselves, and the host does not wait for
// the answer (an embedding would otherwise pay a host wait per step): a thread that meets a
// bad index never reads or writes through it (a gathered element becomes 0, an added one is
// dropped) and lowers the launch's pending position; a one-thread kernel queued after it
// records the index at that position, the op and the size, unless an earlier launch already
// did. The stream runs launches in order, so the record is the first bad index of the first
// faulting op, as the CPU would report it. The host throws the CPU's message, with a note,
// the next time it waits for the stream (a copy to or from the host, synchronize()), which
// a training step does at the latest when it reads its loss. A bad index therefore never
// becomes an out-of-bounds access, which on a GPU would corrupt other tensors or poison the
// context.
//
// The accumulating ops (index_add, scatter_add) add with atomics, so all elements run in
// parallel (an embedding's gradient gathers many tokens into few rows). With repeated
// indices the floating sums then come in no fixed order: results may differ from the
// CPU's, and from run to run, in the last bits. Integer sums are exact.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/kernel_utils.cuh"
#include "tensor/kernel_layout.h"

#include <cstdint>
#include <limits>

namespace dtrain::detail {
namespace {

// ---- range check --------------------------------------------------------------------------

constexpr unsigned long long kNoBadIndex = std::numeric_limits<unsigned long long>::max();

enum IndexOp : int { kIndexSelect, kIndexAdd, kGather, kScatterAdd };
constexpr const char* kIndexOpNames[] = {"index_select", "index_add", "gather", "scatter_add"};

// What a kernel needs to check its indices: the bound and where to report.
struct RangeCheck {
  std::int64_t size;
  unsigned long long* pending;
};

// True when v is a valid position; otherwise lowers the launch's pending position to
// `position` (the bad index's place in the index tensor) and returns false.
__device__ bool in_range(std::int64_t v, std::int64_t position, const RangeCheck& check) {
  if (v >= 0 && v < check.size) return true;
  atomicMin(check.pending, static_cast<unsigned long long>(position));
  return false;
}

// One thread, queued after the op's kernel: moves its pending position into the fault
// record unless an earlier op's fault is there, and resets it for the next launch.
template <class I>
__global__ void record_bad_index(const I* idx, int op, std::int64_t size, unsigned long long* pending,
                                 IndexFault* fault) {
  const unsigned long long position = *pending;
  if (position == kNoBadIndex) return;
  *pending = kNoBadIndex;
  if (fault->raised != 0) return;
  fault->op = op;
  fault->value = static_cast<long long>(idx[position]);
  fault->size = static_cast<long long>(size);
  __threadfence_system();  // the fields before the flag, as the host will read them
  fault->raised = 1;
}

template <class I>
void queue_record(const IndexCheck& check, cudaStream_t stream, const I* idx, IndexOp op, std::int64_t size) {
  record_bad_index<I><<<1, 1, 0, stream>>>(idx, op, size, check.pending, check.fault_on_device);
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

// ---- atomic adds, for every dtype --------------------------------------------------------

__device__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ void atomic_add(std::int32_t* p, std::int32_t v) { atomicAdd(p, v); }
// Two's-complement addition is the same on unsigned words.
__device__ void atomic_add(std::int64_t* p, std::int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}
// There is no 8-bit atomic: add into the byte's place in its aligned 32-bit word (wrapping
// at 256, as u8 arithmetic on the CPU), retrying until no other thread changed the word
// in between. The word's other bytes are written back as read, so neighbours are safe.
__device__ void atomic_add(std::uint8_t* p, std::uint8_t v) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  auto* word = reinterpret_cast<unsigned int*>(addr & ~std::uintptr_t{3});
  const unsigned int shift = static_cast<unsigned int>(addr & 3) * 8;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    const unsigned int byte = ((assumed >> shift) + v) & 0xFFu;
    old = atomicCAS(word, assumed, (assumed & ~(0xFFu << shift)) | (byte << shift));
  } while (old != assumed);
}

// ---- kernels (one thread per element, grid-stride) ----------------------------------------

#define DTRAIN_FOR_EACH(e, total)                                                                      \
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < (total); \
       e += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// out (outer, n, inner) from x (outer, size, inner): row j of out is row idx[j] of x.
template <class T, class I>
__global__ void index_select_kernel(const T* x, const I* idx, T* out, std::int64_t total, Split xs, std::int64_t n,
                                    RangeCheck check) {
  DTRAIN_FOR_EACH(e, total) {
    const std::int64_t i = e % xs.inner, r = e / xs.inner;
    const std::int64_t j = r % n, o = r / n;
    const auto v = static_cast<std::int64_t>(idx[j]);
    out[e] = in_range(v, j, check) ? x[(o * xs.size + v) * xs.inner + i] : T{};
  }
}

// Row j of src (outer, n, inner) added into row idx[j] of out (outer, size, inner).
template <class T, class I>
__global__ void index_add_kernel(const T* src, const I* idx, T* out, std::int64_t total, Split os, std::int64_t n,
                                 RangeCheck check) {
  DTRAIN_FOR_EACH(e, total) {
    const std::int64_t i = e % os.inner, r = e / os.inner;
    const std::int64_t j = r % n, o = r / n;
    const auto v = static_cast<std::int64_t>(idx[j]);
    if (in_range(v, j, check)) atomic_add(out + (o * os.size + v) * os.inner + i, src[e]);
  }
}

// out and idx (outer, n, inner), x (outer, size, inner): out[o, j, i] = x[o, idx[o, j, i], i].
template <class T, class I>
__global__ void gather_kernel(const T* x, const I* idx, T* out, std::int64_t total, Split xs, std::int64_t n,
                              RangeCheck check) {
  DTRAIN_FOR_EACH(e, total) {
    const std::int64_t i = e % xs.inner, o = e / xs.inner / n;
    const auto v = static_cast<std::int64_t>(idx[e]);
    out[e] = in_range(v, e, check) ? x[(o * xs.size + v) * xs.inner + i] : T{};
  }
}

// src and idx (outer, n, inner), out (outer, size, inner): out[o, idx[o, j, i], i] += src[o, j, i].
template <class T, class I>
__global__ void scatter_add_kernel(const T* src, const I* idx, T* out, std::int64_t total, Split os, std::int64_t n,
                                   RangeCheck check) {
  DTRAIN_FOR_EACH(e, total) {
    const std::int64_t i = e % os.inner, o = e / os.inner / n;
    const auto v = static_cast<std::int64_t>(idx[e]);
    if (in_range(v, e, check)) atomic_add(out + (o * os.size + v) * os.inner + i, src[e]);
  }
}

#undef DTRAIN_FOR_EACH

}  // namespace

const IndexCheck& CudaBackend::index_check() {
  std::call_once(index_once_, [&] {
    IndexCheck c;
    DTRAIN_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&c.fault), sizeof(IndexFault), cudaHostAllocMapped));
    *c.fault = IndexFault{};
    DTRAIN_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&c.fault_on_device), c.fault, 0));
    DTRAIN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&c.pending), sizeof(unsigned long long)));
    DTRAIN_CUDA_CHECK(cudaMemset(c.pending, 0xFF, sizeof(unsigned long long)));  // kNoBadIndex
    index_check_ = c;
    index_fault_.store(c.fault, std::memory_order_release);
  });
  return index_check_;
}

void CudaBackend::raise_index_fault() {
  // Before the first indexing op there is nothing to look at (and nothing is set up).
  volatile IndexFault* fault = index_fault_.load(std::memory_order_acquire);
  if (fault == nullptr || fault->raised == 0) return;
  const int op = fault->op;
  const long long value = fault->value, size = fault->size;
  fault->raised = 0;
  DTRAIN_FAIL(
      "{}: index {} is out of range for a dimension of size {} (on cuda:{}; the op's kernel found it "
      "and the error is raised at the next wait for the device, so it may surface after later ops)",
      kIndexOpNames[op], value, size, device_);
}

namespace {

// Checks the indices of an op that has no elements to compute, as the CPU still does.
template <class I>
__global__ void check_indices(const I* idx, std::int64_t n, RangeCheck check) {
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += step) {
    in_range(static_cast<std::int64_t>(idx[e]), e, check);
  }
}

// Runs `launch(check)` (the op's kernel, when it has elements) and queues the record of a
// bad index after it.
template <class I, class Launch>
void checked_launch(const IndexCheck& ic, cudaStream_t stream, const Tensor& index, IndexOp op, std::int64_t size,
                    std::int64_t total, Launch&& launch) {
  const std::int64_t n = index.numel();
  if (n == 0) return;
  const RangeCheck check{size, ic.pending};
  if (total > 0) {
    launch(check);
  } else {
    check_indices<I><<<gpu::blocks_for(n), gpu::kThreads, 0, stream>>>(index.data<I>(), n, check);
  }
  DTRAIN_CUDA_CHECK(cudaGetLastError());
  queue_record<I>(ic, stream, index.data<I>(), op, size);
}

}  // namespace

void CudaBackend::index_select(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  const Tensor xc = x.contiguous(), ic = index.contiguous();
  const IndexCheck& checks = index_check();
  dispatch_index(ic, [&](auto itag) {
    using I = typename decltype(itag)::type;
    const std::int64_t total = out.numel();
    checked_launch<I>(checks, stream_, ic, kIndexSelect, x.size(dim), total, [&](const RangeCheck& check) {
      dispatch_dtype(x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        index_select_kernel<T, I><<<gpu::blocks_for(total), gpu::kThreads, 0, stream_>>>(
            xc.data<T>(), ic.data<I>(), out.data<T>(), total, split_at(xc.shape(), dim), ic.numel(), check);
      });
    });
  });
}

// out is zero-filled (or holds earlier sums) and accumulates.
void CudaBackend::index_add(std::int64_t dim, const Tensor& index, const Tensor& src, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  const Tensor sc = src.contiguous(), ic = index.contiguous();
  const IndexCheck& checks = index_check();
  dispatch_index(ic, [&](auto itag) {
    using I = typename decltype(itag)::type;
    const std::int64_t total = sc.numel();
    checked_launch<I>(checks, stream_, ic, kIndexAdd, out.size(dim), total, [&](const RangeCheck& check) {
      dispatch_dtype(src.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        index_add_kernel<T, I><<<gpu::blocks_for(total), gpu::kThreads, 0, stream_>>>(
            sc.data<T>(), ic.data<I>(), out.data<T>(), total, split_at(out.shape(), dim), ic.numel(), check);
      });
    });
  });
}

void CudaBackend::gather(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  const Tensor xc = x.contiguous(), ic = index.contiguous();
  const IndexCheck& checks = index_check();
  dispatch_index(ic, [&](auto itag) {
    using I = typename decltype(itag)::type;
    const std::int64_t total = out.numel();
    checked_launch<I>(checks, stream_, ic, kGather, x.size(dim), total, [&](const RangeCheck& check) {
      dispatch_dtype(x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        gather_kernel<T, I><<<gpu::blocks_for(total), gpu::kThreads, 0, stream_>>>(
            xc.data<T>(), ic.data<I>(), out.data<T>(), total, split_at(xc.shape(), dim), out.size(dim), check);
      });
    });
  });
}

// out is zero-filled (or holds earlier sums) and accumulates.
void CudaBackend::scatter_add(std::int64_t dim, const Tensor& index, const Tensor& src, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  const Tensor sc = src.contiguous(), ic = index.contiguous();
  const IndexCheck& checks = index_check();
  dispatch_index(ic, [&](auto itag) {
    using I = typename decltype(itag)::type;
    const std::int64_t total = sc.numel();
    checked_launch<I>(checks, stream_, ic, kScatterAdd, out.size(dim), total, [&](const RangeCheck& check) {
      dispatch_dtype(src.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        scatter_add_kernel<T, I><<<gpu::blocks_for(total), gpu::kThreads, 0, stream_>>>(
            sc.data<T>(), ic.data<I>(), out.data<T>(), total, split_at(out.shape(), dim), sc.size(dim), check);
      });
    });
  });
}

// Each input is copied into its slice of out by the strided copy kernel (a plain device
// copy when the slice is contiguous, as for dim 0).
void CudaBackend::cat(const std::vector<Tensor>& inputs, std::int64_t dim, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  std::int64_t at = 0;
  for (const Tensor& t : inputs) {
    const std::int64_t len = t.size(dim);
    if (t.numel() > 0) {
      Tensor slot = out.narrow(dim, at, len);
      copy(t, slot);
    }
    at += len;
  }
}

}  // namespace dtrain::detail
