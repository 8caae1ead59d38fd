// RMS normalization over the last dim on the CPU: x (rows, D) contiguous, rows split across
// the pool's threads. Forward reads a row twice (the sum of squares, then y) in cache;
// backward reads grad_y and x twice per row for dx. Sums run in the input's dtype (f32 for
// f32, f64 for f64), as rstd is stored. The weight's gradient, a sum over rows, is summed
// per block of rows into a partial row, then the partials are added in block order: the
// result does not depend on the thread count.
#include "dtrain/core/parallel.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided_loop.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dtrain::detail {
namespace {

struct Rows {
  std::int64_t rows, d;
  // Rows per parallel chunk: about kGrain values.
  std::int64_t grain() const { return std::max<std::int64_t>(1, cpu::kGrain / std::max<std::int64_t>(d, 1)); }
};

Rows rows_of(const Tensor& x) { return {x.numel() / x.size(-1), x.size(-1)}; }

template <class T>
void forward(const Tensor& x_t, const Tensor& w_t, double eps, Tensor& y_t, Tensor& rstd_t) {
  const Rows r = rows_of(x_t);
  const T* x = x_t.data<T>();
  const T* w = w_t.defined() ? w_t.data<T>() : nullptr;
  T* y = y_t.data<T>();
  T* rstd = rstd_t.data<T>();
  parallel_for(0, r.rows, r.grain(), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t row = b; row < e; ++row) {
      const T* xr = x + row * r.d;
      T* yr = y + row * r.d;
      T squares = 0;
      for (std::int64_t j = 0; j < r.d; ++j) squares += xr[j] * xr[j];
      const T s = T(1) / std::sqrt(squares / static_cast<T>(r.d) + static_cast<T>(eps));
      rstd[row] = s;
      if (w) {
        for (std::int64_t j = 0; j < r.d; ++j) yr[j] = xr[j] * s * w[j];
      } else {
        for (std::int64_t j = 0; j < r.d; ++j) yr[j] = xr[j] * s;
      }
    }
  });
}

// Per row, with h = g * w and xhat = x * s: dx = s * (h - xhat * mean(h * xhat)).
template <class T>
void backward(const Tensor& g_t, const Tensor& x_t, const Tensor& rstd_t, const Tensor& w_t, Tensor& gx_t,
              Tensor& gw_t) {
  const Rows r = rows_of(x_t);
  const T *g = g_t.data<T>(), *x = x_t.data<T>(), *rstd = rstd_t.data<T>();
  const T* w = w_t.defined() ? w_t.data<T>() : nullptr;
  T* gx = gx_t.data<T>();
  // Blocks of rows for the weight's gradient: a fixed split, whatever the thread count.
  const std::int64_t block_rows = r.grain();
  const std::int64_t blocks = (r.rows + block_rows - 1) / block_rows;
  std::vector<T> partial(w ? static_cast<std::size_t>(blocks * r.d) : 0, T(0));
  parallel_for(0, blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t block = b0; block < b1; ++block) {
      T* part = w ? partial.data() + block * r.d : nullptr;
      const std::int64_t end = std::min(r.rows, (block + 1) * block_rows);
      for (std::int64_t row = block * block_rows; row < end; ++row) {
        const T *gr = g + row * r.d, *xr = x + row * r.d;
        T* dr = gx + row * r.d;
        const T s = rstd[row];
        T dot = 0;  // sum(h * x)
        for (std::int64_t j = 0; j < r.d; ++j) dot += (w ? gr[j] * w[j] : gr[j]) * xr[j];
        // s * (h - x s * s * dot / D)
        const T k = s * s * s * dot / static_cast<T>(r.d);
        for (std::int64_t j = 0; j < r.d; ++j) dr[j] = (w ? gr[j] * w[j] : gr[j]) * s - xr[j] * k;
        if (part) {
          for (std::int64_t j = 0; j < r.d; ++j) part[j] += gr[j] * xr[j] * s;
        }
      }
    }
  });
  if (!w) return;
  T* gw = gw_t.data<T>();
  parallel_for(0, r.d, cpu::kGrain / std::max<std::int64_t>(blocks, 1), [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t j = j0; j < j1; ++j) gw[j] = 0;
    for (std::int64_t block = 0; block < blocks; ++block) {
      const T* part = partial.data() + block * r.d;
      for (std::int64_t j = j0; j < j1; ++j) gw[j] += part[j];
    }
  });
}

}  // namespace

void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd) {
  dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward<T>(x, weight, eps, y, rstd);
  });
}

void CpuBackend::rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                                   Tensor& grad_x, Tensor& grad_weight) {
  dispatch_floating(x.dtype(), "rms_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward<T>(grad_y, x, rstd, weight, grad_x, grad_weight);
  });
}

}  // namespace dtrain::detail
