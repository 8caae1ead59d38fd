// CPU softmax and log-softmax along one dim, forward and backward.
//
// The tensors are made contiguous and viewed as (outer, n, inner) with n the softmax dim.
// For the last dim (inner == 1) each row is handled on its own; otherwise a block of up
// to kBlock neighbouring columns is processed together, so that every pass over the n
// rows reads contiguous memory and vectorises across the columns. The forward pass
// subtracts the maximum before exponentiating, so it cannot overflow. Sums accumulate
// in double.
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided_loop.h"
#include "tensor/functors.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dtrain::detail {
namespace {

constexpr std::int64_t kBlock = 256;

// (outer, n, inner) for `dim` of `shape`.
struct Lanes {
  std::int64_t outer = 1, n = 1, inner = 1;
};

Lanes lanes_of(const Shape& shape, std::int64_t dim) {
  Lanes l;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(shape.size()); ++d) {
    if (d < dim) l.outer *= shape[d];
    else if (d == dim) l.n = shape[d];
    else l.inner *= shape[d];
  }
  return l;
}

// Runs f(first element offset, block width w) over every (outer position, column block),
// in parallel, with all elements of a block at offset + i * inner + c for i < n, c < w.
template <class F>
void for_each_block(const Lanes& l, F f) {
  const std::int64_t blocks = (l.inner + kBlock - 1) / kBlock;
  const std::int64_t per_task = l.n * std::min(l.inner, kBlock);
  const std::int64_t grain = std::max<std::int64_t>(1, cpu::kGrain / std::max<std::int64_t>(per_task, 1));
  parallel_for(0, l.outer * blocks, grain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) {
      const std::int64_t o = t / blocks, c0 = (t % blocks) * kBlock;
      f(o * l.n * l.inner + c0, std::min(kBlock, l.inner - c0));
    }
  });
}

// ---- forward ----------------------------------------------------------------------------

// n >= 1. The row maximum comes from Eigen's vectorised NaN-propagating max.
template <class T>
void softmax_row(const T* x, T* y, std::int64_t n, bool log) {
  const T max = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(x, n).template maxCoeff<Eigen::PropagateNaN>();
  double sum = 0;
  if (log) {
    for (std::int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - max);
    const T shift = max + static_cast<T>(std::log(sum));
    for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      y[i] = std::exp(x[i] - max);
      sum += y[i];
    }
    const T scale = static_cast<T>(1 / sum);
    for (std::int64_t i = 0; i < n; ++i) y[i] *= scale;
  }
}

// w columns, element (i, c) at i * stride + c.
template <class T>
void softmax_columns(const T* x, T* y, std::int64_t n, std::int64_t stride, std::int64_t w, bool log, T* max,
                     double* sum) {
  std::fill(max, max + w, -std::numeric_limits<T>::infinity());
  std::fill(sum, sum + w, 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t c = 0; c < w; ++c) {
      const T v = x[i * stride + c];
      max[c] = (v > max[c] || is_nan(v)) ? v : max[c];
    }
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t c = 0; c < w; ++c) {
      const T e = std::exp(x[i * stride + c] - max[c]);
      if (!log) y[i * stride + c] = e;
      sum[c] += e;
    }
  if (log) {
    for (std::int64_t c = 0; c < w; ++c) max[c] += static_cast<T>(std::log(sum[c]));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t c = 0; c < w; ++c) y[i * stride + c] = x[i * stride + c] - max[c];
  } else {
    for (std::int64_t c = 0; c < w; ++c) max[c] = static_cast<T>(1 / sum[c]);  // now the scale
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t c = 0; c < w; ++c) y[i * stride + c] *= max[c];
  }
}

// ---- backward ---------------------------------------------------------------------------
// softmax:     dx = y * (g - sum(g * y))
// log_softmax: dx = g - exp(y) * sum(g)

template <class T>
void softmax_backward_row(const T* g, const T* y, T* dx, std::int64_t n, bool log) {
  double sum = 0;
  if (log) {
    for (std::int64_t i = 0; i < n; ++i) sum += g[i];
    const T s = static_cast<T>(sum);
    for (std::int64_t i = 0; i < n; ++i) dx[i] = g[i] - std::exp(y[i]) * s;
  } else {
    for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(g[i]) * y[i];
    const T s = static_cast<T>(sum);
    for (std::int64_t i = 0; i < n; ++i) dx[i] = y[i] * (g[i] - s);
  }
}

template <class T>
void softmax_backward_columns(const T* g, const T* y, T* dx, std::int64_t n, std::int64_t stride, std::int64_t w,
                              bool log, double* sum) {
  std::fill(sum, sum + w, 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t c = 0; c < w; ++c) {
      const std::int64_t k = i * stride + c;
      sum[c] += log ? static_cast<double>(g[k]) : static_cast<double>(g[k]) * y[k];
    }
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t c = 0; c < w; ++c) {
      const std::int64_t k = i * stride + c;
      const T s = static_cast<T>(sum[c]);
      dx[k] = log ? g[k] - std::exp(y[k]) * s : y[k] * (g[k] - s);
    }
}

}  // namespace

void CpuBackend::softmax(const Tensor& x, std::int64_t dim, bool log, Tensor& out) {
  const Tensor xc = x.contiguous();
  const Lanes l = lanes_of(xc.shape(), dim);
  if (xc.numel() == 0) return;
  dispatch_floating(x.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = xc.data<T>();
    T* yp = out.data<T>();
    if (l.inner == 1) {
      parallel_for(0, l.outer, std::max<std::int64_t>(1, cpu::kGrain / l.n), [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t o = b; o < e; ++o) softmax_row(xp + o * l.n, yp + o * l.n, l.n, log);
      });
      return;
    }
    for_each_block(l, [&](std::int64_t off, std::int64_t w) {
      T max[kBlock];
      double sum[kBlock];
      softmax_columns(xp + off, yp + off, l.n, l.inner, w, log, max, sum);
    });
  });
}

void CpuBackend::softmax_backward(const Tensor& grad_out, const Tensor& y, std::int64_t dim, bool log,
                                  Tensor& grad_x) {
  const Tensor gc = grad_out.contiguous();
  const Tensor yc = y.contiguous();
  const Lanes l = lanes_of(yc.shape(), dim);
  if (yc.numel() == 0) return;
  dispatch_floating(y.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = gc.data<T>();
    const T* ypp = yc.data<T>();
    T* dp = grad_x.data<T>();
    if (l.inner == 1) {
      parallel_for(0, l.outer, std::max<std::int64_t>(1, cpu::kGrain / l.n), [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t o = b; o < e; ++o) softmax_backward_row(gp + o * l.n, ypp + o * l.n, dp + o * l.n, l.n, log);
      });
      return;
    }
    for_each_block(l, [&](std::int64_t off, std::int64_t w) {
      double sum[kBlock];
      softmax_backward_columns(gp + off, ypp + off, dp + off, l.n, l.inner, w, log, sum);
    });
  });
}

}  // namespace dtrain::detail
