// CUDA reductions (sum, mean, max, min over a set of dims) and argmax, with the semantics
// of cpu/reduce.cpp: floating sums accumulate in double and integer sums in i64, max and
// min propagate NaN, argmax returns the first index of the largest value with a NaN
// counting as the largest.
//
// x is split as on the CPU into a nest of kept dims (one output each, in the output's
// row-major order) and a nest of reduced dims (smallest stride innermost), each merged and
// walked by an OffsetCalculator. One kernel serves every case: a block holds `slots`
// outputs, each folded by `lanes` threads that stride through its reduced elements and
// then combine their accumulators in a shared-memory tree. The threads of a warp should
// read neighbouring addresses, so the lanes run along threadIdx.x when the reduced
// elements are contiguous (row sums, a full sum, the per-channel sums of (N, C, H, W)),
// and the outputs do when instead the kept dim is (the column sums of (N, C)). When there
// are too few outputs to fill the GPU, the reduced range is cut into `splits` chunks
// (gridDim.y), whose accumulators a second kernel merges in order. The schedule depends
// only on the shapes, so results are reproducible run to run.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/kernel_utils.cuh"
#include "tensor/cuda/offset_calculator.h"
#include "tensor/functors.h"
#include "tensor/kernel_layout.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

namespace dtrain::detail {
namespace {

using gpu::OffsetCalculator;

constexpr int kBlock = 256;  // threads per block, and the shared tree's size
// Enough blocks to fill an H200 (132 SMs) several times over; fewer outputs than that
// split their reduced range.
constexpr std::int64_t kTargetBlocks = 1024;
// The fewest elements per thread that justify another split (and so a partial to merge).
constexpr std::int64_t kMinPerThread = 16;
constexpr std::int64_t kMaxSplits = 65535;  // gridDim.y's limit

// ---- reducers: the CPU's, as device objects. The identity is a member set on the host,
// where std::numeric_limits is available, and add() also receives the element's position
// in the reduced range (argmax's answer).

template <class T>
struct SumR {
  using In = T;
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;
  using Out = std::conditional_t<std::is_floating_point_v<T>, T, std::int64_t>;
  Acc identity;
  static SumR make() { return {0}; }
  DTRAIN_HD Acc add(Acc a, In x, std::int64_t) const { return a + static_cast<Acc>(x); }
  DTRAIN_HD Acc merge(Acc a, Acc b) const { return a + b; }
  DTRAIN_HD Out finish(Acc a, std::int64_t) const { return static_cast<Out>(a); }
};

template <class T>
struct MeanR {
  using In = T;
  using Acc = double;  // mean is defined on floating types only
  using Out = T;
  Acc identity;
  static MeanR make() { return {0}; }
  DTRAIN_HD Acc add(Acc a, In x, std::int64_t) const { return a + static_cast<Acc>(x); }
  DTRAIN_HD Acc merge(Acc a, Acc b) const { return a + b; }
  DTRAIN_HD Out finish(Acc a, std::int64_t count) const { return static_cast<Out>(a / static_cast<Acc>(count)); }
};

// Max and Min: once the accumulator is NaN no comparison replaces it.
template <class T>
struct MaxR {
  using In = T;
  using Acc = T;
  using Out = T;
  Acc identity;
  static MaxR make() {
    if constexpr (std::is_floating_point_v<T>) return {-std::numeric_limits<T>::infinity()};
    else return {std::numeric_limits<T>::lowest()};
  }
  DTRAIN_HD Acc add(Acc a, In x, std::int64_t) const { return (x > a || is_nan(x)) ? x : a; }
  DTRAIN_HD Acc merge(Acc a, Acc b) const { return add(a, b, 0); }
  DTRAIN_HD Out finish(Acc a, std::int64_t) const { return a; }
};

template <class T>
struct MinR {
  using In = T;
  using Acc = T;
  using Out = T;
  Acc identity;
  static MinR make() {
    if constexpr (std::is_floating_point_v<T>) return {std::numeric_limits<T>::infinity()};
    else return {std::numeric_limits<T>::max()};
  }
  DTRAIN_HD Acc add(Acc a, In x, std::int64_t) const { return (x < a || is_nan(x)) ? x : a; }
  DTRAIN_HD Acc merge(Acc a, Acc b) const { return add(a, b, 0); }
  DTRAIN_HD Out finish(Acc a, std::int64_t) const { return a; }
};

// A candidate of argmax; index -1 until an element has been folded in.
template <class T>
struct ArgAcc {
  T value;
  std::int64_t index;
};

// Lanes see the elements out of order, so argmax ranks candidates by a total order whose
// maximum is the CPU's answer: any NaN above any number, then the larger value, and among
// equals (NaNs included) the lower index.
template <class T>
struct ArgmaxR {
  using In = T;
  using Acc = ArgAcc<T>;
  using Out = std::int64_t;
  Acc identity;
  static ArgmaxR make() { return {{T{}, -1}}; }
  static DTRAIN_HD bool beats(const Acc& b, const Acc& a) {
    if (b.index < 0) return false;
    if (a.index < 0) return true;
    const bool b_nan = is_nan(b.value), a_nan = is_nan(a.value);
    if (a_nan || b_nan) return b_nan && (!a_nan || b.index < a.index);
    if (b.value != a.value) return b.value > a.value;
    return b.index < a.index;
  }
  DTRAIN_HD Acc add(Acc a, In x, std::int64_t i) const { return merge(a, Acc{x, i}); }
  DTRAIN_HD Acc merge(Acc a, Acc b) const { return beats(b, a) ? b : a; }
  DTRAIN_HD Out finish(Acc a, std::int64_t) const { return a.index; }
};

// ---- kernels ---------------------------------------------------------------------------

// Launch shape: blockDim is (lanes, slots) when lanes_on_x, else (slots, lanes); both
// powers of two. gridDim.x strides over groups of `slots` outputs, gridDim.y over the
// `chunk`-sized pieces of the reduced range. With one split, outputs are finished here;
// otherwise each split writes its accumulators to partial[split * outputs + output].
template <class R>
__global__ void reduce_kernel(const typename R::In* x, OffsetCalculator<1> kept, OffsetCalculator<1> red,
                              std::int64_t outputs, std::int64_t count, std::int64_t chunk, bool lanes_on_x, R r,
                              typename R::Acc* partial, typename R::Out* out) {
  using Acc = typename R::Acc;
  __shared__ Acc tree[kBlock];
  const int lane = lanes_on_x ? threadIdx.x : threadIdx.y;
  const int lanes = lanes_on_x ? blockDim.x : blockDim.y;
  const int slot = lanes_on_x ? threadIdx.y : threadIdx.x;
  const int slots = lanes_on_x ? blockDim.y : blockDim.x;
  const int me = threadIdx.y * blockDim.x + threadIdx.x;
  // tree index of lane `lane + step` of this thread's output
  const int step_stride = lanes_on_x ? 1 : blockDim.x;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * chunk;
  const std::int64_t end = begin + chunk < count ? begin + chunk : count;

  // The loop bounds are the same for the whole block, so every thread reaches each barrier.
  for (std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * slots; first < outputs;
       first += static_cast<std::int64_t>(gridDim.x) * slots) {
    const std::int64_t o = first + slot;
    Acc acc = r.identity;
    if (o < outputs) {
      std::int64_t base[1];
      kept.offsets(o, base);
      const typename R::In* xo = x + base[0];
      for (std::int64_t i = begin + lane; i < end; i += lanes) {
        std::int64_t at[1];
        red.offsets(i, at);
        acc = r.add(acc, xo[at[0]], i);
      }
    }
    tree[me] = acc;
    __syncthreads();
    for (int step = lanes / 2; step > 0; step /= 2) {
      if (lane < step) tree[me] = r.merge(tree[me], tree[me + step * step_stride]);
      __syncthreads();
    }
    if (lane == 0 && o < outputs) {
      if (partial != nullptr) partial[static_cast<std::int64_t>(blockIdx.y) * outputs + o] = tree[me];
      else out[o] = r.finish(tree[me], count);
    }
    __syncthreads();  // the tree is refilled for the next group of outputs
  }
}

// Merges each output's split accumulators in split order.
template <class R>
__global__ void finish_kernel(const typename R::Acc* partial, std::int64_t splits, std::int64_t outputs,
                              std::int64_t count, R r, typename R::Out* out) {
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t o = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < outputs; o += step) {
    typename R::Acc acc = r.identity;
    for (std::int64_t s = 0; s < splits; ++s) acc = r.merge(acc, partial[s * outputs + o]);
    out[o] = r.finish(acc, count);
  }
}

// ---- host side -------------------------------------------------------------------------

OffsetCalculator<1> calculator_of(const cpu::LoopNest<1>& nest, const Tensor& x) {
  const auto ndim = static_cast<int>(nest.sizes.size());
  DTRAIN_CHECK(ndim <= gpu::kMaxDims, "cuda: reductions take up to {} dims after merging, got {} (shape {})",
               gpu::kMaxDims, ndim, shape_str(x.shape()));
  OffsetCalculator<1> calc{};
  calc.ndim = ndim;
  for (int d = 0; d < ndim; ++d) {
    calc.sizes[d] = nest.sizes[d];
    calc.strides[d][0] = nest.strides[0][d];
  }
  return calc;
}

template <class R>
void run_reduce(Backend& backend, cudaStream_t stream, const Tensor& x, const std::vector<std::int64_t>& dims,
                Tensor& out, R r) {
  const ReduceNests n = split_dims(x, dims);
  if (n.outputs == 0) return;
  // Outputs across the warp only when the reduced run is strided and the kept one is not
  // (the CPU's column schedule); otherwise lanes across it.
  const bool red_contiguous = n.red.strides[0].back() == 1;
  const bool lanes_on_x = red_contiguous || n.kept.strides[0].back() != 1 || n.kept.sizes.back() == 1;
  int lanes, slots;
  if (lanes_on_x) {
    lanes = gpu::pow2_at_least(n.count, kBlock);
    slots = gpu::pow2_at_least(n.outputs, kBlock / lanes);
  } else {
    slots = gpu::pow2_at_least(n.outputs, 32);
    lanes = gpu::pow2_at_least(n.count, kBlock / slots);
  }
  const std::int64_t blocks = std::min((n.outputs + slots - 1) / slots, gpu::kMaxBlocks);
  std::int64_t splits = 1;
  if (blocks < kTargetBlocks) {
    const std::int64_t wanted = (kTargetBlocks + blocks - 1) / blocks;
    const std::int64_t worthwhile = std::max<std::int64_t>(1, n.count / (lanes * kMinPerThread));
    splits = std::min({wanted, worthwhile, kMaxSplits});
  }
  const std::int64_t chunk = (n.count + splits - 1) / splits;
  if (chunk > 0) splits = (n.count + chunk - 1) / chunk;  // no empty trailing split

  const dim3 block = lanes_on_x ? dim3(lanes, slots) : dim3(slots, lanes);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(splits));
  const auto* xp = x.data<typename R::In>();
  auto* op = out.data<typename R::Out>();
  const OffsetCalculator<1> kept = calculator_of(n.kept, x), red = calculator_of(n.red, x);
  if (splits == 1) {
    reduce_kernel<R><<<grid, block, 0, stream>>>(xp, kept, red, n.outputs, n.count, chunk, lanes_on_x, r, nullptr,
                                                 op);
    DTRAIN_CUDA_CHECK(cudaGetLastError());
    return;
  }
  gpu::Scratch partial(backend, static_cast<std::size_t>(splits * n.outputs) * sizeof(typename R::Acc));
  auto* pp = partial.as<typename R::Acc>();
  reduce_kernel<R><<<grid, block, 0, stream>>>(xp, kept, red, n.outputs, n.count, chunk, lanes_on_x, r, pp, op);
  DTRAIN_CUDA_CHECK(cudaGetLastError());
  finish_kernel<R><<<gpu::blocks_for(n.outputs), gpu::kThreads, 0, stream>>>(pp, splits, n.outputs, n.count, r, op);
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

// Runs reducer R<T> for x's element type T, over every dtype or only the floating ones.
template <template <class> class R, bool kFloatingOnly = false>
void reduce_as(Backend& backend, cudaStream_t stream, const Tensor& x, const std::vector<std::int64_t>& dims,
               Tensor& out, const char* op) {
  auto run = [&](auto tag) { run_reduce(backend, stream, x, dims, out, R<typename decltype(tag)::type>::make()); };
  if constexpr (kFloatingOnly) dispatch_floating(x.dtype(), op, run);
  else dispatch_dtype(x.dtype(), run);
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor& x, const std::vector<std::int64_t>& dims, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  switch (op) {
    case ReduceOp::Sum: return reduce_as<SumR>(*this, stream_, x, dims, out, "sum");
    case ReduceOp::Mean: return reduce_as<MeanR, true>(*this, stream_, x, dims, out, "mean");
    case ReduceOp::Max: return reduce_as<MaxR>(*this, stream_, x, dims, out, "max");
    case ReduceOp::Min: return reduce_as<MinR>(*this, stream_, x, dims, out, "min");
    case ReduceOp::kCount: break;
  }
  DTRAIN_FAIL("reduce: unknown ReduceOp {}", static_cast<int>(op));
}

void CudaBackend::argmax(const Tensor& x, std::int64_t dim, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_reduce(*this, stream_, x, {dim}, out, ArgmaxR<T>::make());
  });
}

}  // namespace dtrain::detail
