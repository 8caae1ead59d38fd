// Layer normalization over the last dim on the CPU, one pass each way: x (rows, D)
// contiguous, rows split across the pool's threads. The composed form (mean, subtract,
// square, mean, rsqrt, multiply, then the affine ops; and as many passes backward) read and
// wrote a GPT's activations about a dozen times per LayerNorm; here forward reads a row
// three times in cache (mean, variance, y) and writes y once, backward reads grad_y and x
// twice per row and writes dx once.
//
// Sums run in the input's dtype over lane_sum.h's interleaved accumulators, so the row loops
// vectorize in the clones and the result does not depend on the ISA or the thread count. The weight's and bias's gradients, sums
// over rows, are summed per fixed block of rows into partial rows, then the partials are
// added in block order.
#include "dtrain/core/parallel.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/isa_clones.h"
#include "tensor/cpu/lane_sum.h"
#include "tensor/cpu/strided_loop.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dtrain::detail {
namespace {

using cpu::lane_sum;

// One row: its mean and 1 / sqrt(biased variance + eps), then y = (x - mean) * rstd * w + b.
template <class T>
DTRAIN_ISA_CLONES void forward_row(const T* __restrict x, const T* __restrict w, const T* __restrict b, std::int64_t d,
                                   T eps, T* __restrict y, T* mean_out, T* rstd_out) {
  const T mean = lane_sum<T>(d, [&](std::int64_t j) { return x[j]; }) / static_cast<T>(d);
  const T var = lane_sum<T>(d, [&](std::int64_t j) {
                  const T c = x[j] - mean;
                  return c * c;
                }) /
                static_cast<T>(d);
  const T rstd = T(1) / std::sqrt(var + eps);
  *mean_out = mean;
  *rstd_out = rstd;
  if (w && b) {
    for (std::int64_t j = 0; j < d; ++j) y[j] = (x[j] - mean) * rstd * w[j] + b[j];
  } else if (w) {
    for (std::int64_t j = 0; j < d; ++j) y[j] = (x[j] - mean) * rstd * w[j];
  } else if (b) {
    for (std::int64_t j = 0; j < d; ++j) y[j] = (x[j] - mean) * rstd + b[j];
  } else {
    for (std::int64_t j = 0; j < d; ++j) y[j] = (x[j] - mean) * rstd;
  }
}

// One row of the backward, with xhat = (x - mean) * rstd and h = g * w (g without a weight):
// dx = rstd * (h - mean(h) - xhat * mean(h * xhat)); adds g * xhat to gw and g to gb where
// given (the row's share of the parameters' gradients).
template <class T>
DTRAIN_ISA_CLONES void backward_row(const T* __restrict g, const T* __restrict x, const T* __restrict w, std::int64_t d,
                                    T mean, T rstd, T* __restrict dx, T* __restrict gw, T* __restrict gb) {
  T sum_h, sum_hx;
  if (w) {
    sum_h = lane_sum<T>(d, [&](std::int64_t j) { return g[j] * w[j]; });
    sum_hx = lane_sum<T>(d, [&](std::int64_t j) { return g[j] * w[j] * ((x[j] - mean) * rstd); });
  } else {
    sum_h = lane_sum<T>(d, [&](std::int64_t j) { return g[j]; });
    sum_hx = lane_sum<T>(d, [&](std::int64_t j) { return g[j] * ((x[j] - mean) * rstd); });
  }
  const T mean_h = sum_h / static_cast<T>(d), mean_hx = sum_hx / static_cast<T>(d);
  if (w) {
    for (std::int64_t j = 0; j < d; ++j) dx[j] = rstd * (g[j] * w[j] - mean_h - (x[j] - mean) * rstd * mean_hx);
  } else {
    for (std::int64_t j = 0; j < d; ++j) dx[j] = rstd * (g[j] - mean_h - (x[j] - mean) * rstd * mean_hx);
  }
  if (gw)
    for (std::int64_t j = 0; j < d; ++j) gw[j] += g[j] * ((x[j] - mean) * rstd);
  if (gb)
    for (std::int64_t j = 0; j < d; ++j) gb[j] += g[j];
}

struct Rows {
  std::int64_t rows, d;
  // Rows per parallel chunk: about kGrain values.
  std::int64_t grain() const { return std::max<std::int64_t>(1, cpu::kGrain / std::max<std::int64_t>(d, 1)); }
};

Rows rows_of(const Tensor& x) { return {x.numel() / x.size(-1), x.size(-1)}; }

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

template <class T>
void forward(const Tensor& x_t, const Tensor& w_t, const Tensor& b_t, double eps, Tensor& y_t, Tensor& mean_t,
             Tensor& rstd_t) {
  const Rows r = rows_of(x_t);
  const T *x = x_t.data<T>(), *w = data_or_null<T>(w_t), *b = data_or_null<T>(b_t);
  T *y = y_t.data<T>(), *mean = mean_t.data<T>(), *rstd = rstd_t.data<T>();
  parallel_for(0, r.rows, r.grain(), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t row = r0; row < r1; ++row)
      forward_row<T>(x + row * r.d, w, b, r.d, static_cast<T>(eps), y + row * r.d, mean + row, rstd + row);
  });
}

// The sum over blocks of partial rows (blocks x d) into out (d), in block order.
template <class T>
void sum_blocks(const std::vector<T>& partial, std::int64_t blocks, std::int64_t d, T* out) {
  parallel_for(0, d, cpu::kGrain / std::max<std::int64_t>(blocks, 1), [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t j = j0; j < j1; ++j) out[j] = 0;
    for (std::int64_t block = 0; block < blocks; ++block) {
      const T* part = partial.data() + block * d;
      for (std::int64_t j = j0; j < j1; ++j) out[j] += part[j];
    }
  });
}

template <class T>
void backward(const Tensor& g_t, const Tensor& x_t, const Tensor& mean_t, const Tensor& rstd_t, const Tensor& w_t,
              Tensor& gx_t, Tensor& gw_t, Tensor& gb_t) {
  const Rows r = rows_of(x_t);
  const T *g = g_t.data<T>(), *x = x_t.data<T>(), *mean = mean_t.data<T>(), *rstd = rstd_t.data<T>();
  const T* w = data_or_null<T>(w_t);
  T* gx = gx_t.data<T>();
  // Blocks of rows for the parameters' gradients: a fixed split, whatever the thread count.
  const std::int64_t block_rows = r.grain();
  const std::int64_t blocks = (r.rows + block_rows - 1) / block_rows;
  const auto partial_size = [&](const Tensor& t) { return t.defined() ? static_cast<std::size_t>(blocks * r.d) : 0; };
  std::vector<T> partial_w(partial_size(gw_t), T(0)), partial_b(partial_size(gb_t), T(0));
  parallel_for(0, blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t block = b0; block < b1; ++block) {
      T* pw = partial_w.empty() ? nullptr : partial_w.data() + block * r.d;
      T* pb = partial_b.empty() ? nullptr : partial_b.data() + block * r.d;
      const std::int64_t end = std::min(r.rows, (block + 1) * block_rows);
      for (std::int64_t row = block * block_rows; row < end; ++row)
        backward_row<T>(g + row * r.d, x + row * r.d, w, r.d, mean[row], rstd[row], gx + row * r.d, pw, pb);
    }
  });
  if (gw_t.defined()) sum_blocks(partial_w, blocks, r.d, gw_t.data<T>());
  if (gb_t.defined()) sum_blocks(partial_b, blocks, r.d, gb_t.data<T>());
}

}  // namespace

void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                            Tensor& mean, Tensor& rstd) {
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward<T>(x, weight, bias, eps, y, mean, rstd);
  });
}

void CpuBackend::layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& weight, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) {
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward<T>(grad_y, x, mean, rstd, weight, grad_x, grad_weight, grad_bias);
  });
}

}  // namespace dtrain::detail
