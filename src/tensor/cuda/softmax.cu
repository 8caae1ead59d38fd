// CUDA softmax and log-softmax along one dim, forward and backward, with the math of
// cpu/softmax.cpp: the forward pass subtracts the row's maximum (NaN-propagating) before
// exponentiating, sums accumulate in double, and each element is computed by the same
// expression as on the CPU.
//
// The tensors are made contiguous and viewed as (outer, n, inner) with n the softmax dim;
// a row is the n elements of one (outer, inner) position, element i at
// o * n * inner + c + i * inner. A block holds `slots` rows, each worked on by `lanes`
// threads that stride along it and combine their partial max and sum in a shared-memory
// tree. For the last dim (inner == 1) the lanes run along threadIdx.x, reading a row's
// contiguous elements together; otherwise the rows do, since neighbouring rows (columns
// c, c + 1) are neighbours in memory.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/kernel_utils.cuh"
#include "tensor/functors.h"

#include <cmath>
#include <limits>

namespace dtrain::detail {
namespace {

constexpr int kBlock = 256;  // threads per block, and the shared tree's size

// Where this thread sits in the (lanes, slots) block: see reduce_kernel in reduce.cu.
struct Place {
  int lane, lanes, slot, slots, me, step_stride;
  __device__ explicit Place(bool lanes_on_x)
      : lane(lanes_on_x ? threadIdx.x : threadIdx.y),
        lanes(lanes_on_x ? blockDim.x : blockDim.y),
        slot(lanes_on_x ? threadIdx.y : threadIdx.x),
        slots(lanes_on_x ? blockDim.y : blockDim.x),
        me(threadIdx.y * blockDim.x + threadIdx.x),
        step_stride(lanes_on_x ? 1 : blockDim.x) {}
};

// Combines the lanes' values in tree[] (one per thread, already stored) with `merge`; every
// lane of the row then reads the result. Ends with a barrier, so the tree may be refilled.
template <class Merge>
__device__ double tree_reduce(double* tree, const Place& p, Merge merge) {
  __syncthreads();
  for (int step = p.lanes / 2; step > 0; step /= 2) {
    if (p.lane < step) tree[p.me] = merge(tree[p.me], tree[p.me + step * p.step_stride]);
    __syncthreads();
  }
  const double result = tree[p.me - p.lane * p.step_stride];
  __syncthreads();
  return result;
}

struct MaxOrNan {
  __device__ double operator()(double a, double b) const { return (b > a || is_nan(b)) ? b : a; }
};
struct Plus {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// The loop bounds are the same for the whole block, so every thread reaches each barrier.
// Maxima travel through the double tree unchanged (every T converts exactly).
template <class T>
__global__ void softmax_kernel(const T* x, T* y, std::int64_t rows, std::int64_t n, std::int64_t inner,
                               bool lanes_on_x, bool log) {
  __shared__ double tree[kBlock];
  const Place p(lanes_on_x);
  for (std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * p.slots; first < rows;
       first += static_cast<std::int64_t>(gridDim.x) * p.slots) {
    const std::int64_t row = first + p.slot;
    const bool active = row < rows;
    const std::int64_t base = active ? (row / inner) * n * inner + row % inner : 0;
    const T* xr = x + base;
    T* yr = y + base;

    double part = -INFINITY;
    if (active)
      for (std::int64_t i = p.lane; i < n; i += p.lanes) part = MaxOrNan{}(part, xr[i * inner]);
    tree[p.me] = part;
    const T max = static_cast<T>(tree_reduce(tree, p, MaxOrNan{}));

    part = 0;
    if (active)
      for (std::int64_t i = p.lane; i < n; i += p.lanes) part += static_cast<T>(std::exp(xr[i * inner] - max));
    tree[p.me] = part;
    const double sum = tree_reduce(tree, p, Plus{});

    if (!active) continue;
    if (log) {
      const T shift = max + static_cast<T>(std::log(sum));
      for (std::int64_t i = p.lane; i < n; i += p.lanes) yr[i * inner] = xr[i * inner] - shift;
    } else {
      const T scale = static_cast<T>(1 / sum);
      for (std::int64_t i = p.lane; i < n; i += p.lanes) {
        const T e = std::exp(xr[i * inner] - max);
        yr[i * inner] = e * scale;
      }
    }
  }
}

// softmax:     dx = y * (g - sum(g * y))
// log_softmax: dx = g - exp(y) * sum(g)
template <class T>
__global__ void softmax_backward_kernel(const T* g, const T* y, T* dx, std::int64_t rows, std::int64_t n,
                                        std::int64_t inner, bool lanes_on_x, bool log) {
  __shared__ double tree[kBlock];
  const Place p(lanes_on_x);
  for (std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * p.slots; first < rows;
       first += static_cast<std::int64_t>(gridDim.x) * p.slots) {
    const std::int64_t row = first + p.slot;
    const bool active = row < rows;
    const std::int64_t base = active ? (row / inner) * n * inner + row % inner : 0;
    const T* gr = g + base;
    const T* yr = y + base;
    T* dr = dx + base;

    double part = 0;
    if (active)
      for (std::int64_t i = p.lane; i < n; i += p.lanes) {
        const std::int64_t k = i * inner;
        part += log ? static_cast<double>(gr[k]) : static_cast<double>(gr[k]) * yr[k];
      }
    tree[p.me] = part;
    const T s = static_cast<T>(tree_reduce(tree, p, Plus{}));

    if (!active) continue;
    for (std::int64_t i = p.lane; i < n; i += p.lanes) {
      const std::int64_t k = i * inner;
      dr[k] = log ? gr[k] - std::exp(yr[k]) * s : yr[k] * (gr[k] - s);
    }
  }
}

// The launch for rows of n elements, inner apart.
struct RowLaunch {
  dim3 grid, block;
  bool lanes_on_x;
};

RowLaunch row_launch(std::int64_t rows, std::int64_t n, std::int64_t inner) {
  RowLaunch l;
  l.lanes_on_x = inner == 1;
  int lanes, slots;
  if (l.lanes_on_x) {
    lanes = gpu::pow2_at_least(n, kBlock);
    slots = gpu::pow2_at_least(rows, kBlock / lanes);
  } else {
    slots = gpu::pow2_at_least(rows, 32);
    lanes = gpu::pow2_at_least(n, kBlock / slots);
  }
  l.block = l.lanes_on_x ? dim3(lanes, slots) : dim3(slots, lanes);
  l.grid = dim3(static_cast<unsigned>(std::min((rows + slots - 1) / slots, gpu::kMaxBlocks)));
  return l;
}

// (rows, n, inner) of a contiguous tensor for `dim`: rows = outer * inner.
struct Rows {
  std::int64_t rows = 1, n = 1, inner = 1;
};

Rows rows_of(const Shape& shape, std::int64_t dim) {
  Rows r;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(shape.size()); ++d) {
    if (d == dim) r.n = shape[d];
    else r.rows *= shape[d];
    if (d > dim) r.inner *= shape[d];
  }
  return r;
}

}  // namespace

void CudaBackend::softmax(const Tensor& x, std::int64_t dim, bool log, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  if (x.numel() == 0) return;
  const Tensor xc = x.contiguous();
  const Rows r = rows_of(xc.shape(), dim);
  const RowLaunch l = row_launch(r.rows, r.n, r.inner);
  dispatch_floating(x.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_kernel<T><<<l.grid, l.block, 0, stream_>>>(xc.data<T>(), out.data<T>(), r.rows, r.n, r.inner,
                                                        l.lanes_on_x, log);
    DTRAIN_CUDA_CHECK(cudaGetLastError());
  });
}

void CudaBackend::softmax_backward(const Tensor& grad_out, const Tensor& y, std::int64_t dim, bool log,
                                   Tensor& grad_x) {
  cuda::DeviceGuard guard(device_);
  if (y.numel() == 0) return;
  const Tensor gc = grad_out.contiguous();
  const Tensor yc = y.contiguous();
  const Rows r = rows_of(yc.shape(), dim);
  const RowLaunch l = row_launch(r.rows, r.n, r.inner);
  dispatch_floating(y.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward_kernel<T><<<l.grid, l.block, 0, stream_>>>(gc.data<T>(), yc.data<T>(), grad_x.data<T>(), r.rows,
                                                                 r.n, r.inner, l.lanes_on_x, log);
    DTRAIN_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace dtrain::detail
