// Fused attention on CUDA (fused_attention.h), FlashAttention's scheme with the math of
// cpu/flash_attention.cpp: no (T, T) matrix in memory, only the output and each row's
// log-sum-exp kept by the forward; the backward recomputes the probabilities from them.
//
// Layout: a block of kWarps warps, one query (or key) row per warp, meets the other side in
// tiles of 32 rows staged in shared memory, one tile row per lane. A lane computes one
// score (a dot product over D from shared memory; rows padded to D + 1 so that the 32 lanes
// read 32 banks); the warp's shuffles give the tile's maximum and sum; then each lane
// updates its columns of the row's accumulator (columns lane, lane + 32, ...) from the
// tile's rows. Causal masking skips every tile past a block's last row.
//
// The backward runs three kernels so that no two blocks write the same memory (no atomics:
// the result does not depend on the launch order): delta_i = dO_i . O_i per query row; dQ
// with a warp per query row, walking key tiles; dK and dV with a warp per key row, walking
// query tiles of every query head that shares the key/value head (grouped-query heads).
// The scores are recomputed in both gradient kernels: twice the forward's products, for a
// kernel without atomics or a (T, T) buffer.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/kernel_utils.cuh"

#include <algorithm>
#include <cmath>

namespace dtrain::detail {
namespace {

constexpr int kWarps = 4;   // rows per block, one per warp
constexpr int kTile = 32;   // rows of the other side per step: one per lane
constexpr int kMaxGridY = 65535;

// Element strides of a (B, heads, T, D) tensor's first three dims; the last is contiguous.
struct Layout {
  std::int64_t b, h, t;
};

Layout layout_of(const Tensor& x) { return {x.stride(0), x.stride(1), x.stride(2)}; }

// The sizes every kernel needs.
struct Sizes {
  std::int64_t heads, kv_heads, groups, steps, d;
};

// -inf as T (numeric_limits is host-only code for nvcc).
template <class T>
__device__ T minus_infinity() {
  return -static_cast<T>(INFINITY);
}

__device__ std::int64_t lesser(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

template <class T>
__device__ T warp_max(T x) {
  for (int offset = 16; offset > 0; offset /= 2) x = ::fmax(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

template <class T>
__device__ T warp_sum(T x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <class T>
__device__ T dot(const T* a, const T* b, std::int64_t d) {
  T s = 0;
  for (std::int64_t c = 0; c < d; ++c) s += a[c] * b[c];
  return s;
}

// Copies rows [row0, row0 + rows) of a head (row r at src + r * stride) into a tile with row
// pitch `pitch`, all threads of the block taking elements in turn.
template <class T>
__device__ void stage_rows(const T* src, std::int64_t stride, std::int64_t row0, std::int64_t rows, std::int64_t d,
                           T* tile, std::int64_t pitch) {
  for (std::int64_t e = threadIdx.x; e < rows * d; e += blockDim.x) {
    const std::int64_t r = e / d, c = e % d;
    tile[r * pitch + c] = src[(row0 + r) * stride + c];
  }
}

// Keys [j0, j0 + cols) that query row i sees: all, or those <= i when causal (may be <= 0).
__device__ std::int64_t visible_keys(bool causal, std::int64_t i, std::int64_t j0, std::int64_t cols) {
  return causal ? lesser(cols, i - j0 + 1) : cols;
}

// Dynamic shared memory, aligned for doubles; each kernel carves it into its tiles.
template <class T>
__device__ T* shared_memory() {
  extern __shared__ __align__(16) unsigned char memory[];
  return reinterpret_cast<T*>(memory);
}

// Shared elements of each kernel (see the carving at the top of each).
std::int64_t forward_elements(std::int64_t d) { return kTile * (d + 1) + kTile * d + kWarps * (2 * d + kTile); }
std::int64_t query_grad_elements(std::int64_t d) { return 2 * kTile * (d + 1) + kWarps * (3 * d + kTile); }
std::int64_t key_grad_elements(std::int64_t d) { return 2 * kTile * (d + 1) + 2 * kTile + kWarps * (4 * d + 2 * kTile); }
std::int64_t most_shared_bytes(std::int64_t d, std::size_t element) {
  return std::max({forward_elements(d), query_grad_elements(d), key_grad_elements(d)}) *
         static_cast<std::int64_t>(element);
}

template <class T>
__global__ void forward_kernel(const T* q, Layout lq, const T* k, Layout lk, const T* v, Layout lv, T* out, Layout lo,
                               T* lse, std::int64_t batch_heads, Sizes n, bool causal, T scale) {
  const std::int64_t d = n.d;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* k_tile = shared_memory<T>();         // kTile x (d + 1)
  T* v_tile = k_tile + kTile * (d + 1);   // kTile x d: read a row at a time, no padding needed
  T* q_row = v_tile + kTile * d + warp * (2 * d + kTile);
  T* acc = q_row + d;
  T* probs = acc + d;  // kTile: this warp's row of the tile's probabilities
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.x) * kWarps, i = i0 + warp;
  const bool active = i < n.steps;
  const std::int64_t key_end = causal ? lesser(i0 + kWarps, n.steps) : n.steps;
  for (std::int64_t bh = blockIdx.y; bh < batch_heads; bh += gridDim.y) {
    const std::int64_t b = bh / n.heads, h = bh % n.heads, hk = h / n.groups;
    const T* Q = q + b * lq.b + h * lq.h;
    const T* K = k + b * lk.b + hk * lk.h;
    const T* V = v + b * lv.b + hk * lv.h;
    __syncthreads();  // the previous head's readers are done with this warp's rows
    if (active)
      for (std::int64_t c = lane; c < d; c += 32) {
        q_row[c] = Q[i * lq.t + c];
        acc[c] = 0;
      }
    T row_max = minus_infinity<T>(), row_sum = 0;
    for (std::int64_t j0 = 0; j0 < key_end; j0 += kTile) {
      const std::int64_t cols = lesser(kTile, key_end - j0);
      __syncthreads();  // every warp is done with the previous tile
      stage_rows(K, lk.t, j0, cols, d, k_tile, d + 1);
      stage_rows(V, lv.t, j0, cols, d, v_tile, d);
      __syncthreads();
      const std::int64_t seen = active ? visible_keys(causal, i, j0, cols) : 0;
      if (seen <= 0) continue;  // uniform across the warp: one row per warp
      const T s = lane < seen ? dot(q_row, k_tile + lane * (d + 1), d) * scale : minus_infinity<T>();
      // seen > 0: lane 0's score is finite, so the new maximum is too.
      const T new_max = ::fmax(row_max, warp_max(s));
      const T p = lane < seen ? ::exp(s - new_max) : T(0);
      const T alpha = ::exp(row_max - new_max);  // 0 on the first tile (row_max = -inf)
      row_sum = row_sum * alpha + warp_sum(p);
      row_max = new_max;
      probs[lane] = p;
      __syncwarp();
      for (std::int64_t c = lane; c < d; c += 32) {
        T a = acc[c] * alpha;
        for (std::int64_t jj = 0; jj < seen; ++jj) a += probs[jj] * v_tile[jj * d + c];
        acc[c] = a;
      }
      __syncwarp();  // before the next tile's probabilities overwrite these
    }
    if (!active) continue;
    T* O = out + b * lo.b + h * lo.h + i * lo.t;
    for (std::int64_t c = lane; c < d; c += 32) O[c] = acc[c] / row_sum;
    if (lane == 0) lse[bh * n.steps + i] = row_max + ::log(row_sum);
  }
}

// delta[row] = dO_row . O_row for each (b, h, t) row, a warp per row.
template <class T>
__global__ void delta_kernel(const T* grad_out, Layout lg, const T* out, Layout lo, std::int64_t rows, Sizes n,
                             T* delta) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < rows;
       row += warps) {
    const std::int64_t bh = row / n.steps, t = row % n.steps, b = bh / n.heads, h = bh % n.heads;
    const T* g = grad_out + b * lg.b + h * lg.h + t * lg.t;
    const T* o = out + b * lo.b + h * lo.h + t * lo.t;
    T s = 0;
    for (std::int64_t c = lane; c < n.d; c += 32) s += g[c] * o[c];
    s = warp_sum(s);
    if (lane == 0) delta[row] = s;
  }
}

template <class T>
__global__ void query_grad_kernel(const T* grad_out, Layout lg, const T* q, Layout lq, const T* k, Layout lk,
                                  const T* v, Layout lv, const T* lse, const T* delta, T* grad_q, Layout lgq,
                                  std::int64_t batch_heads, Sizes n, bool causal, T scale) {
  const std::int64_t d = n.d;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* k_tile = shared_memory<T>();        // kTile x (d + 1)
  T* v_tile = k_tile + kTile * (d + 1);  // kTile x (d + 1): lanes read different rows
  T* q_row = v_tile + kTile * (d + 1) + warp * (3 * d + kTile);
  T* g_row = q_row + d;
  T* acc = g_row + d;
  T* score_grads = acc + d;  // kTile
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.x) * kWarps, i = i0 + warp;
  const bool active = i < n.steps;
  const std::int64_t key_end = causal ? lesser(i0 + kWarps, n.steps) : n.steps;
  for (std::int64_t bh = blockIdx.y; bh < batch_heads; bh += gridDim.y) {
    const std::int64_t b = bh / n.heads, h = bh % n.heads, hk = h / n.groups;
    const T* K = k + b * lk.b + hk * lk.h;
    const T* V = v + b * lv.b + hk * lv.h;
    const T row_lse = active ? lse[bh * n.steps + i] : T(0);
    const T row_delta = active ? delta[bh * n.steps + i] : T(0);
    __syncthreads();
    if (active)
      for (std::int64_t c = lane; c < d; c += 32) {
        q_row[c] = q[b * lq.b + h * lq.h + i * lq.t + c];
        g_row[c] = grad_out[b * lg.b + h * lg.h + i * lg.t + c];
        acc[c] = 0;
      }
    for (std::int64_t j0 = 0; j0 < key_end; j0 += kTile) {
      const std::int64_t cols = lesser(kTile, key_end - j0);
      __syncthreads();
      stage_rows(K, lk.t, j0, cols, d, k_tile, d + 1);
      stage_rows(V, lv.t, j0, cols, d, v_tile, d + 1);
      __syncthreads();
      const std::int64_t seen = active ? visible_keys(causal, i, j0, cols) : 0;
      if (seen <= 0) continue;
      T ds = 0;
      if (lane < seen) {
        const T p = ::exp(dot(q_row, k_tile + lane * (d + 1), d) * scale - row_lse);
        ds = p * (dot(g_row, v_tile + lane * (d + 1), d) - row_delta);
      }
      score_grads[lane] = ds;
      __syncwarp();
      for (std::int64_t c = lane; c < d; c += 32) {
        T a = acc[c];
        for (std::int64_t jj = 0; jj < seen; ++jj) a += score_grads[jj] * k_tile[jj * (d + 1) + c];
        acc[c] = a;
      }
      __syncwarp();
    }
    if (!active) continue;
    T* dQ = grad_q + b * lgq.b + h * lgq.h + i * lgq.t;
    for (std::int64_t c = lane; c < d; c += 32) dQ[c] = acc[c] * scale;
  }
}

template <class T>
__global__ void key_grad_kernel(const T* grad_out, Layout lg, const T* q, Layout lq, const T* k, Layout lk, const T* v,
                                Layout lv, const T* lse, const T* delta, T* grad_k, Layout lgk, T* grad_v, Layout lgv,
                                std::int64_t batch_kv_heads, Sizes n, bool causal, T scale) {
  const std::int64_t d = n.d;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* q_tile = shared_memory<T>();        // kTile x (d + 1)
  T* g_tile = q_tile + kTile * (d + 1);  // kTile x (d + 1): dO's rows
  T* tile_lse = g_tile + kTile * (d + 1);
  T* tile_delta = tile_lse + kTile;
  T* k_row = tile_delta + kTile + warp * (4 * d + 2 * kTile);
  T* v_row = k_row + d;
  T* k_acc = v_row + d;
  T* v_acc = k_acc + d;
  T* probs = v_acc + d;          // kTile
  T* score_grads = probs + kTile;  // kTile
  const std::int64_t j_first = static_cast<std::int64_t>(blockIdx.x) * kWarps, j = j_first + warp;
  const bool active = j < n.steps;
  // Causal: queries before the block's first key see none of its keys.
  const std::int64_t query_begin = causal ? j_first : 0;
  for (std::int64_t bh = blockIdx.y; bh < batch_kv_heads; bh += gridDim.y) {
    const std::int64_t b = bh / n.kv_heads, hk = bh % n.kv_heads;
    __syncthreads();
    if (active)
      for (std::int64_t c = lane; c < d; c += 32) {
        k_row[c] = k[b * lk.b + hk * lk.h + j * lk.t + c];
        v_row[c] = v[b * lv.b + hk * lv.h + j * lv.t + c];
        k_acc[c] = 0;
        v_acc[c] = 0;
      }
    for (std::int64_t h = hk * n.groups; h < (hk + 1) * n.groups; ++h) {
      const T* Q = q + b * lq.b + h * lq.h;
      const T* G = grad_out + b * lg.b + h * lg.h;
      const T* row_lse = lse + (b * n.heads + h) * n.steps;
      const T* row_delta = delta + (b * n.heads + h) * n.steps;
      for (std::int64_t i0 = query_begin; i0 < n.steps; i0 += kTile) {
        const std::int64_t rows = lesser(kTile, n.steps - i0);
        __syncthreads();
        stage_rows(Q, lq.t, i0, rows, d, q_tile, d + 1);
        stage_rows(G, lg.t, i0, rows, d, g_tile, d + 1);
        if (threadIdx.x < rows) {
          tile_lse[threadIdx.x] = row_lse[i0 + threadIdx.x];
          tile_delta[threadIdx.x] = row_delta[i0 + threadIdx.x];
        }
        __syncthreads();
        if (!active) continue;
        const bool seen = lane < rows && (!causal || i0 + lane >= j);
        T p = 0, ds = 0;
        if (seen) {
          p = ::exp(dot(k_row, q_tile + lane * (d + 1), d) * scale - tile_lse[lane]);
          ds = p * (dot(v_row, g_tile + lane * (d + 1), d) - tile_delta[lane]);
        }
        probs[lane] = p;
        score_grads[lane] = ds;
        __syncwarp();
        for (std::int64_t c = lane; c < d; c += 32) {
          T dv = v_acc[c], dk = k_acc[c];
          for (std::int64_t ii = 0; ii < rows; ++ii) {
            dv += probs[ii] * g_tile[ii * (d + 1) + c];
            dk += score_grads[ii] * q_tile[ii * (d + 1) + c];
          }
          v_acc[c] = dv;
          k_acc[c] = dk;
        }
        __syncwarp();
      }
    }
    if (!active) continue;
    T* dK = grad_k + b * lgk.b + hk * lgk.h + j * lgk.t;
    T* dV = grad_v + b * lgv.b + hk * lgv.h + j * lgv.t;
    for (std::int64_t c = lane; c < d; c += 32) {
      dK[c] = k_acc[c] * scale;
      dV[c] = v_acc[c];
    }
  }
}

Sizes sizes_of(const Tensor& q, const Tensor& k) {
  return {q.size(1), k.size(1), q.size(1) / k.size(1), q.size(2), q.size(3)};
}

// A grid of row blocks by (batch, head) pairs; the kernels stride over pairs past the limit.
dim3 grid_for(std::int64_t steps, std::int64_t pairs) {
  return dim3(static_cast<unsigned>((steps + kWarps - 1) / kWarps),
              static_cast<unsigned>(std::min<std::int64_t>(pairs, kMaxGridY)));
}

// Opts a kernel into more than the default 48 KB of dynamic shared memory when it needs it.
template <class Kernel>
void allow_shared(Kernel kernel, std::int64_t bytes) {
  if (bytes > 48 * 1024)
    DTRAIN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <class T>
void launch_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FusedAttentionOptions& o, Tensor& out,
                    Tensor& lse, cudaStream_t stream) {
  const Sizes n = sizes_of(q, k);
  const std::int64_t pairs = q.size(0) * n.heads, bytes = forward_elements(n.d) * sizeof(T);
  allow_shared(forward_kernel<T>, bytes);
  forward_kernel<T><<<grid_for(n.steps, pairs), kWarps * 32, bytes, stream>>>(
      q.data<T>(), layout_of(q), k.data<T>(), layout_of(k), v.data<T>(), layout_of(v), out.data<T>(), layout_of(out),
      lse.data<T>(), pairs, n, o.causal, static_cast<T>(o.scale));
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void launch_backward(Backend& backend, const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& out, const Tensor& lse, const FusedAttentionOptions& o, Tensor& grad_q,
                     Tensor& grad_k, Tensor& grad_v, cudaStream_t stream) {
  const Sizes n = sizes_of(q, k);
  const std::int64_t pairs = q.size(0) * n.heads, kv_pairs = q.size(0) * n.kv_heads, rows = pairs * n.steps;
  const T scale = static_cast<T>(o.scale);
  gpu::Scratch delta(backend, static_cast<std::size_t>(rows) * sizeof(T));
  const std::int64_t warps_per_block = gpu::kThreads / 32;
  delta_kernel<T><<<static_cast<unsigned>(std::min((rows + warps_per_block - 1) / warps_per_block, gpu::kMaxBlocks)),
                    gpu::kThreads, 0, stream>>>(grad_out.data<T>(), layout_of(grad_out), out.data<T>(), layout_of(out),
                                                rows, n, delta.as<T>());
  DTRAIN_CUDA_CHECK(cudaGetLastError());

  const std::int64_t query_bytes = query_grad_elements(n.d) * sizeof(T);
  allow_shared(query_grad_kernel<T>, query_bytes);
  query_grad_kernel<T><<<grid_for(n.steps, pairs), kWarps * 32, query_bytes, stream>>>(
      grad_out.data<T>(), layout_of(grad_out), q.data<T>(), layout_of(q), k.data<T>(), layout_of(k), v.data<T>(),
      layout_of(v), lse.data<T>(), delta.as<T>(), grad_q.data<T>(), layout_of(grad_q), pairs, n, o.causal, scale);
  DTRAIN_CUDA_CHECK(cudaGetLastError());

  const std::int64_t key_bytes = key_grad_elements(n.d) * sizeof(T);
  allow_shared(key_grad_kernel<T>, key_bytes);
  key_grad_kernel<T><<<grid_for(n.steps, kv_pairs), kWarps * 32, key_bytes, stream>>>(
      grad_out.data<T>(), layout_of(grad_out), q.data<T>(), layout_of(q), k.data<T>(), layout_of(k), v.data<T>(),
      layout_of(v), lse.data<T>(), delta.as<T>(), grad_k.data<T>(), layout_of(grad_k), grad_v.data<T>(),
      layout_of(grad_v), kv_pairs, n, o.causal, scale);
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool CudaBackend::has_fused_attention(DType dtype, std::int64_t head_dim) const {
  if (dtype != DType::f32 && dtype != DType::f64) return false;
  int most = shared_per_block_.load(std::memory_order_relaxed);
  if (most < 0) {
    DTRAIN_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
    shared_per_block_.store(most, std::memory_order_relaxed);
  }
  return most_shared_bytes(head_dim, dtype == DType::f32 ? sizeof(float) : sizeof(double)) <= most;
}

void CudaBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FusedAttentionOptions& o,
                                    Tensor& out, Tensor& lse) {
  cuda::DeviceGuard guard(device_);
  if (q.dtype() == DType::f32) return launch_forward<float>(q, k, v, o, out, lse, stream_);
  DTRAIN_CHECK(q.dtype() == DType::f64, "attention_forward: no CUDA kernel for {}", dtype_name(q.dtype()));
  launch_forward<double>(q, k, v, o, out, lse, stream_);
}

void CudaBackend::attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse, const FusedAttentionOptions& o,
                                     Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) {
  cuda::DeviceGuard guard(device_);
  if (q.dtype() == DType::f32)
    return launch_backward<float>(*this, grad_out, q, k, v, out, lse, o, grad_q, grad_k, grad_v, stream_);
  DTRAIN_CHECK(q.dtype() == DType::f64, "attention_backward: no CUDA kernel for {}", dtype_name(q.dtype()));
  launch_backward<double>(*this, grad_out, q, k, v, out, lse, o, grad_q, grad_k, grad_v, stream_);
}

}  // namespace dtrain::detail
