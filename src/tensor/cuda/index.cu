// CUDA indexing and joining, with the semantics of cpu/index.cpp. Tensors are made
// contiguous and seen as (outer, size along dim, inner); each kernel runs one thread per
// element of its output (index_select, gather) or of its source (index_add, scatter_add),
// which finds its (outer, position, inner) coordinates by division.
//
// Index values are range-checked before any kernel writes through them, as on the CPU:
// a first kernel finds the lowest position holding a bad index, and the host reads that
// position back (a small copy that waits for the stream) and throws the CPU's message. A
// bad index therefore never becomes an out-of-bounds access, which on a GPU would corrupt
// other tensors or poison the context; the price is one wait per call.
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

template <class I>
__global__ void find_bad_index(const I* idx, std::int64_t n, std::int64_t size, unsigned long long* first_bad) {
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const auto v = static_cast<std::int64_t>(idx[i]);
    if (v < 0 || v >= size) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

// Throws naming `op` on the first index of contiguous `index` outside [0, size).
template <class I>
void check_range(CudaBackend& backend, cudaStream_t stream, const Tensor& index, std::int64_t size, const char* op) {
  const std::int64_t n = index.numel();
  if (n == 0) return;
  const I* idx = index.data<I>();
  gpu::Scratch flag(backend, sizeof(unsigned long long));
  DTRAIN_CUDA_CHECK(cudaMemsetAsync(flag.as<void>(), 0xFF, sizeof(unsigned long long), stream));  // kNoBadIndex
  find_bad_index<I><<<gpu::blocks_for(n), gpu::kThreads, 0, stream>>>(idx, n, size, flag.as<unsigned long long>());
  DTRAIN_CUDA_CHECK(cudaGetLastError());
  unsigned long long first = kNoBadIndex;
  backend.copy_to_host(flag.as<void>(), &first, sizeof first);
  if (first == kNoBadIndex) return;
  I value{};
  backend.copy_to_host(idx + first, &value, sizeof value);
  DTRAIN_FAIL("{}: index {} is out of range for a dimension of size {}", op, static_cast<std::int64_t>(value), size);
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

#define DTRAIN_FOR_EACH(e, total)                                                                         \
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < (total); \
       e += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// out (outer, n, inner) from x (outer, size, inner): row j of out is row idx[j] of x.
template <class T, class I>
__global__ void index_select_kernel(const T* x, const I* idx, T* out, std::int64_t total, Split xs, std::int64_t n) {
  DTRAIN_FOR_EACH(e, total) {
    const std::int64_t i = e % xs.inner, r = e / xs.inner;
    const std::int64_t j = r % n, o = r / n;
    out[e] = x[(o * xs.size + static_cast<std::int64_t>(idx[j])) * xs.inner + i];
  }
}

// Row j of src (outer, n, inner) added into row idx[j] of out (outer, size, inner).
template <class T, class I>
__global__ void index_add_kernel(const T* src, const I* idx, T* out, std::int64_t total, Split os, std::int64_t n) {
  DTRAIN_FOR_EACH(e, total) {
    const std::int64_t i = e % os.inner, r = e / os.inner;
    const std::int64_t j = r % n, o = r / n;
    atomic_add(out + (o * os.size + static_cast<std::int64_t>(idx[j])) * os.inner + i, src[e]);
  }
}

// out and idx (outer, n, inner), x (outer, size, inner): out[o, j, i] = x[o, idx[o, j, i], i].
template <class T, class I>
__global__ void gather_kernel(const T* x, const I* idx, T* out, std::int64_t total, Split xs, std::int64_t n) {
  DTRAIN_FOR_EACH(e, total) {
    const std::int64_t i = e % xs.inner, o = e / xs.inner / n;
    out[e] = x[(o * xs.size + static_cast<std::int64_t>(idx[e])) * xs.inner + i];
  }
}

// src and idx (outer, n, inner), out (outer, size, inner): out[o, idx[o, j, i], i] += src[o, j, i].
template <class T, class I>
__global__ void scatter_add_kernel(const T* src, const I* idx, T* out, std::int64_t total, Split os, std::int64_t n) {
  DTRAIN_FOR_EACH(e, total) {
    const std::int64_t i = e % os.inner, o = e / os.inner / n;
    atomic_add(out + (o * os.size + static_cast<std::int64_t>(idx[e])) * os.inner + i, src[e]);
  }
}

#undef DTRAIN_FOR_EACH

}  // namespace

void CudaBackend::index_select(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  const Tensor xc = x.contiguous(), ic = index.contiguous();
  dispatch_index(ic, [&](auto itag) {
    using I = typename decltype(itag)::type;
    check_range<I>(*this, stream_, ic, x.size(dim), "index_select");
    const std::int64_t total = out.numel();
    if (total == 0) return;
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      index_select_kernel<T, I><<<gpu::blocks_for(total), gpu::kThreads, 0, stream_>>>(
          xc.data<T>(), ic.data<I>(), out.data<T>(), total, split_at(xc.shape(), dim), ic.numel());
      DTRAIN_CUDA_CHECK(cudaGetLastError());
    });
  });
}

// out is zero-filled (or holds earlier sums) and accumulates.
void CudaBackend::index_add(std::int64_t dim, const Tensor& index, const Tensor& src, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  const Tensor sc = src.contiguous(), ic = index.contiguous();
  dispatch_index(ic, [&](auto itag) {
    using I = typename decltype(itag)::type;
    check_range<I>(*this, stream_, ic, out.size(dim), "index_add");
    const std::int64_t total = sc.numel();
    if (total == 0) return;
    dispatch_dtype(src.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      index_add_kernel<T, I><<<gpu::blocks_for(total), gpu::kThreads, 0, stream_>>>(
          sc.data<T>(), ic.data<I>(), out.data<T>(), total, split_at(out.shape(), dim), ic.numel());
      DTRAIN_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void CudaBackend::gather(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  const Tensor xc = x.contiguous(), ic = index.contiguous();
  dispatch_index(ic, [&](auto itag) {
    using I = typename decltype(itag)::type;
    check_range<I>(*this, stream_, ic, x.size(dim), "gather");
    const std::int64_t total = out.numel();
    if (total == 0) return;
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      gather_kernel<T, I><<<gpu::blocks_for(total), gpu::kThreads, 0, stream_>>>(
          xc.data<T>(), ic.data<I>(), out.data<T>(), total, split_at(xc.shape(), dim), out.size(dim));
      DTRAIN_CUDA_CHECK(cudaGetLastError());
    });
  });
}

// out is zero-filled (or holds earlier sums) and accumulates.
void CudaBackend::scatter_add(std::int64_t dim, const Tensor& index, const Tensor& src, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  const Tensor sc = src.contiguous(), ic = index.contiguous();
  dispatch_index(ic, [&](auto itag) {
    using I = typename decltype(itag)::type;
    check_range<I>(*this, stream_, ic, out.size(dim), "scatter_add");
    const std::int64_t total = sc.numel();
    if (total == 0) return;
    dispatch_dtype(src.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      scatter_add_kernel<T, I><<<gpu::blocks_for(total), gpu::kThreads, 0, stream_>>>(
          sc.data<T>(), ic.data<I>(), out.data<T>(), total, split_at(out.shape(), dim), sc.size(dim));
      DTRAIN_CUDA_CHECK(cudaGetLastError());
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
