// CPU reductions (sum, mean, max, min over a set of dims) and argmax.
//
// x is split into two loop nests, the kept dims (one output per position, in the output's
// row-major order) and the reduced dims, each coalesced. Three schedules:
// - the innermost reduced run is contiguous: each output folds its runs with vectorised
//   loops (row sums, the per-channel sums of batch norm);
// - the innermost kept run is contiguous instead: a block of outputs accumulates whole
//   rows at once, vectorised across outputs (the bias gradient: sum of (N, C) over N);
// - otherwise each output folds its elements through strides.
// One output over one long contiguous run (a full sum) is split into fixed-size chunks
// folded in parallel and merged in order. No schedule depends on the thread count, so
// results are bitwise reproducible.
#include "tensor/cpu/blocked_layout.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided_loop.h"
#include "tensor/functors.h"
#include "tensor/kernel_layout.h"

#include <Eigen/Core>

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

namespace dtrain::detail {
namespace {

using cpu::kGrain;
using Nest = cpu::LoopNest<1>;

// ---- reducers: how elements of type In fold into an accumulator -------------------------

// Floating sums accumulate in double: a sum of 1M f32 values then loses little more than
// the final rounding to f32, and the widening costs little next to reading the memory.
// Integer sums use i64.
template <class T>
struct SumReducer {
  using In = T;
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;
  using Out = std::conditional_t<std::is_floating_point_v<T>, T, std::int64_t>;
  static Acc identity() { return 0; }
  static Acc add(Acc a, In x) { return a + static_cast<Acc>(x); }
  static Acc merge(Acc a, Acc b) { return a + b; }
  static Out finish(Acc a, std::int64_t) { return static_cast<Out>(a); }
};

template <class T>
struct MeanReducer : SumReducer<T> {
  using typename SumReducer<T>::Acc;
  using Out = T;
  static Out finish(Acc a, std::int64_t count) { return static_cast<Out>(a / static_cast<Acc>(count)); }
};

// Max and Min propagate NaN: once the accumulator is NaN no comparison replaces it.
// Their contiguous runs go through Eigen's NaN-propagating packet max/min (fold_run):
// GCC does not vectorise the comparison chain with its NaN test.
template <class T>
using Run = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

template <class T>
struct MaxReducer {
  using In = T;
  using Acc = T;
  using Out = T;
  static Acc identity() {
    if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  static Acc add(Acc a, In x) { return (x > a || is_nan(x)) ? x : a; }
  static Acc merge(Acc a, Acc b) { return add(a, b); }
  static Acc fold_run(const In* p, std::int64_t n) {
    return n == 0 ? identity() : Run<T>(p, n).template maxCoeff<Eigen::PropagateNaN>();
  }
  static Out finish(Acc a, std::int64_t) { return a; }
};

template <class T>
struct MinReducer {
  using In = T;
  using Acc = T;
  using Out = T;
  static Acc identity() {
    if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::max();
  }
  static Acc add(Acc a, In x) { return (x < a || is_nan(x)) ? x : a; }
  static Acc merge(Acc a, Acc b) { return add(a, b); }
  static Acc fold_run(const In* p, std::int64_t n) {
    return n == 0 ? identity() : Run<T>(p, n).template minCoeff<Eigen::PropagateNaN>();
  }
  static Out finish(Acc a, std::int64_t) { return a; }
};

// ---- folding one output's elements ----------------------------------------------------

// A contiguous run: the reducer's own fold_run when it has one; otherwise eight
// independent accumulators, which break the dependency chain of a serial fold and so let
// the compiler vectorise it without reassociating floating-point math itself.
template <class R>
typename R::Acc fold_contiguous(const typename R::In* p, std::int64_t n) {
  if constexpr (requires { R::fold_run(p, n); }) {
    return R::fold_run(p, n);
  } else {
    constexpr int kLanes = 8;
    typename R::Acc lane[kLanes];
    std::fill(lane, lane + kLanes, R::identity());
    std::int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) lane[j] = R::add(lane[j], p[i + j]);
    typename R::Acc acc = R::identity();
    for (int j = 0; j < kLanes; ++j) acc = R::merge(acc, lane[j]);
    for (; i < n; ++i) acc = R::add(acc, p[i]);
    return acc;
  }
}

// Folds the reduced nest from dim d down, starting at p.
template <class R>
void fold(const typename R::In* p, const Nest& red, std::size_t d, typename R::Acc& acc) {
  const std::int64_t n = red.sizes[d], s = red.strides[0][d];
  if (d + 1 < red.sizes.size()) {
    for (std::int64_t i = 0; i < n; ++i) fold<R>(p + i * s, red, d + 1, acc);
  } else if (s == 1) {
    acc = R::merge(acc, fold_contiguous<R>(p, n));
  } else {
    for (std::int64_t i = 0; i < n; ++i) acc = R::add(acc, p[i * s]);
  }
}

// Folds each of w contiguous columns of every reduced row into acc[0, w).
template <class R>
void fold_columns(const typename R::In* p, const Nest& red, std::size_t d, std::int64_t w, typename R::Acc* acc) {
  const std::int64_t n = red.sizes[d], s = red.strides[0][d];
  for (std::int64_t i = 0; i < n; ++i) {
    const typename R::In* row = p + i * s;
    if (d + 1 < red.sizes.size()) {
      fold_columns<R>(row, red, d + 1, w, acc);
    } else {
      for (std::int64_t m = 0; m < w; ++m) acc[m] = R::add(acc[m], row[m]);
    }
  }
}

// ---- schedules ----------------------------------------------------------------------------

// The full reduction of one contiguous run, in fixed-size chunks merged in order.
template <class R>
typename R::Out reduce_all_contiguous(const typename R::In* x, std::int64_t n, std::int64_t count) {
  constexpr std::int64_t kChunk = 4 * kGrain;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<typename R::Acc> partial(chunks);
  parallel_for(0, chunks, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t c = b; c < e; ++c)
      partial[c] = fold_contiguous<R>(x + c * kChunk, std::min(kChunk, n - c * kChunk));
  });
  typename R::Acc acc = R::identity();
  for (auto p : partial) acc = R::merge(acc, p);
  return R::finish(acc, count);
}

template <class R>
void reduce_per_output(const typename R::In* x, const ReduceNests& r, typename R::Out* out) {
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(r.count, 1));
  parallel_for(0, r.outputs, grain, [&](std::int64_t b, std::int64_t e) {
    cpu::NestCursor<1> cursor(r.kept, r.kept.sizes.size(), b);
    for (std::int64_t o = b; o < e; ++o, cursor.next()) {
      typename R::Acc acc = R::identity();
      fold<R>(x + cursor.offset(), r.red, 0, acc);
      out[o] = R::finish(acc, r.count);
    }
  });
}

// Outputs [q*M + m0, q*M + m0 + w) for each outer kept position q, with M the contiguous
// innermost kept run: whole rows are added into a block of accumulators.
template <class R>
void reduce_columns(const typename R::In* x, const ReduceNests& r, typename R::Out* out) {
  constexpr std::int64_t kBlock = 512;
  const std::size_t outer_dims = r.kept.sizes.size() - 1;
  const std::int64_t m_total = r.kept.sizes.back();
  const std::int64_t blocks = (m_total + kBlock - 1) / kBlock;
  const std::int64_t tasks = (r.outputs / m_total) * blocks;
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(r.count * kBlock, 1));
  parallel_for(0, tasks, grain, [&](std::int64_t b, std::int64_t e) {
    std::vector<typename R::Acc> acc(kBlock);
    for (std::int64_t t = b; t < e; ++t) {
      const std::int64_t q = t / blocks, m0 = (t % blocks) * kBlock;
      const std::int64_t w = std::min(kBlock, m_total - m0);
      const std::int64_t base = cpu::NestCursor<1>(r.kept, outer_dims, q).offset();
      std::fill(acc.begin(), acc.begin() + w, R::identity());
      fold_columns<R>(x + base + m0, r.red, 0, w, acc.data());
      for (std::int64_t m = 0; m < w; ++m) out[q * m_total + m0 + m] = R::finish(acc[m], r.count);
    }
  });
}

template <class R>
void run_reduce(const Tensor& x, const std::vector<std::int64_t>& dims, Tensor& out) {
  const ReduceNests r = split_dims(x, dims);
  if (r.outputs == 0) return;
  const auto* xp = x.data<typename R::In>();
  auto* op = out.data<typename R::Out>();
  const bool red_contiguous = r.red.strides[0].back() == 1;
  if (r.outputs == 1 && r.red.sizes.size() == 1 && red_contiguous) {
    op[0] = reduce_all_contiguous<R>(xp, r.red.sizes[0], r.count);
  } else if (!red_contiguous && r.kept.strides[0].back() == 1 && r.kept.sizes.back() > 1) {
    reduce_columns<R>(xp, r, op);
  } else {
    reduce_per_output<R>(xp, r, op);
  }
}

// Runs reducer R<T> for x's element type T, over every dtype or only the floating ones.
template <template <class> class R, bool kFloatingOnly = false>
void reduce_as(const Tensor& x, const std::vector<std::int64_t>& dims, Tensor& out, const char* op) {
  auto run = [&](auto tag) { run_reduce<R<typename decltype(tag)::type>>(x, dims, out); };
  if constexpr (kFloatingOnly) dispatch_floating(x.dtype(), op, run);
  else dispatch_dtype(x.dtype(), run);
}

// Per-channel sums of a blocked f32 activation over (N, H, W), as a convolution's bias
// gradient takes them: lane k of channel block cb adds channel cb * B + k. Summed in double
// as the plain kernel sums (in another order: the doubles may differ in their last bits),
// without making x plain.
template <int B>
void channel_sums_blocked(const float* x, const Shape& shape, float* out) {
  const std::int64_t n = shape[0], c = shape[1], s = shape[2] * shape[3];
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(n * s * B, 1));
  parallel_for(0, c / B, grain, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t cb = b0; cb < b1; ++cb) {
      double acc[B] = {};
      for (std::int64_t i = 0; i < n; ++i) {
        const float* block = x + (i * c + cb * B) * s;
        for (std::int64_t j = 0; j < s; ++j)
          for (int k = 0; k < B; ++k) acc[k] += static_cast<double>(block[j * B + k]);
      }
      for (int k = 0; k < B; ++k) out[cb * B + k] = static_cast<float>(acc[k]);
    }
  });
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& x, const std::vector<std::int64_t>& dims, Tensor& out) {
  if (const auto blocked = onednn::blocked_of(x);
      blocked && op == ReduceOp::Sum && dims == std::vector<std::int64_t>{0, 2, 3}) {
    onednn::with_block(*blocked, [&](auto block) {
      channel_sums_blocked<decltype(block)::value>(blocked->floats(), x.shape(), out.data<float>());
    });
    return;
  }
  switch (op) {
    case ReduceOp::Sum: return reduce_as<SumReducer>(x, dims, out, "sum");
    case ReduceOp::Mean: return reduce_as<MeanReducer, true>(x, dims, out, "mean");
    case ReduceOp::Max: return reduce_as<MaxReducer>(x, dims, out, "max");
    case ReduceOp::Min: return reduce_as<MinReducer>(x, dims, out, "min");
    case ReduceOp::kCount: break;
  }
  DTRAIN_FAIL("reduce: unknown ReduceOp {}", static_cast<int>(op));
}

// The first index of the largest value along `dim`; a NaN counts as the largest.
void CpuBackend::argmax(const Tensor& x, std::int64_t dim, Tensor& out) {
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const ReduceNests r = split_dims(x, {dim});
    if (r.outputs == 0) return;
    const T* xp = x.data<T>();
    auto* op = out.data<std::int64_t>();
    const std::int64_t n = x.shape()[dim], s = x.strides()[dim];
    parallel_for(0, r.outputs, std::max<std::int64_t>(1, kGrain / n), [&](std::int64_t b, std::int64_t e) {
      cpu::NestCursor<1> cursor(r.kept, r.kept.sizes.size(), b);
      for (std::int64_t o = b; o < e; ++o, cursor.next()) {
        const T* p = xp + cursor.offset();
        T best = p[0];
        std::int64_t best_i = 0;
        for (std::int64_t i = 1; i < n && !is_nan(best); ++i) {
          const T v = p[i * s];
          if (v > best || is_nan(v)) {
            best = v;
            best_i = i;
          }
        }
        op[o] = best_i;
      }
    });
  });
}

}  // namespace dtrain::detail
