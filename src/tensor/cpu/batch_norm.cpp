// Training-mode batch normalization on the CPU, fused per channel. Composed of generic
// ops it takes ~11 passes over the activations forward and ~15 backward; here forward
// reads x twice (mean, then the centred sum of squares, which stays accurate where
// E[x^2] - E[x]^2 would cancel) and writes y once, and backward reads grad_y and x twice
// and writes grad_x once. x is (N, C, S) contiguous: channel c is N planes of S values;
// channels are split across the pool's threads. Sums are accumulated in double per plane.
#include "dtrain/core/parallel.h"
#include "tensor/cpu/cpu_backend.h"

#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include <cmath>

namespace dtrain::detail {
namespace {

template <class T>
using Plane = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using OutPlane = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

struct Layout {
  std::int64_t n, c, s;  // images, channels, values per plane
  std::int64_t plane(std::int64_t image, std::int64_t channel) const { return (image * c + channel) * s; }
  // Channels per parallel chunk: ~64K values, well above a pool wake-up.
  std::int64_t grain() const { return std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(n * s, 1)); }
};

Layout layout_of(const Tensor& x) { return {x.size(0), x.size(1), x.numel() / std::max<std::int64_t>(x.size(0) * x.size(1), 1)}; }

template <class T>
T param_or(const Tensor& t, std::int64_t c, T fallback) {
  return t.defined() ? t.data<T>()[c] : fallback;
}

template <class T>
void forward(const Tensor& x_t, const Tensor& gamma, const Tensor& beta, double eps, Tensor& y_t, Tensor& mean_t,
             Tensor& var_t) {
  const Layout l = layout_of(x_t);
  const T* x = x_t.data<T>();
  T* y = y_t.data<T>();
  const double count = static_cast<double>(l.n * l.s);
  parallel_for(0, l.c, l.grain(), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      double sum = 0;
      for (std::int64_t i = 0; i < l.n; ++i) sum += static_cast<double>(Plane<T>(x + l.plane(i, c), l.s).sum());
      const double mean = sum / count;
      double squares = 0;
      for (std::int64_t i = 0; i < l.n; ++i) {
        squares += static_cast<double>((Plane<T>(x + l.plane(i, c), l.s) - static_cast<T>(mean)).square().sum());
      }
      const double var = squares / count;
      const double scale = static_cast<double>(param_or<T>(gamma, c, T(1))) / std::sqrt(var + eps);
      const double shift = static_cast<double>(param_or<T>(beta, c, T(0))) - mean * scale;
      for (std::int64_t i = 0; i < l.n; ++i) {
        OutPlane<T>(y + l.plane(i, c), l.s) = Plane<T>(x + l.plane(i, c), l.s) * static_cast<T>(scale) +
                                              static_cast<T>(shift);
      }
      mean_t.data<T>()[c] = static_cast<T>(mean);
      var_t.data<T>()[c] = static_cast<T>(var);
    }
  });
}

// With xhat = (x - mean) * invstd, k = gamma * invstd and m = N * S values per channel:
//   grad_beta = sum(g), grad_gamma = sum(g * xhat),
//   grad_x = k * (g - grad_beta / m - xhat * grad_gamma / m),
// which is a * g + b * x + d per channel, one pass.
template <class T>
void backward(const Tensor& g_t, const Tensor& x_t, const Tensor& mean_t, const Tensor& var_t, const Tensor& gamma,
              double eps, Tensor& gx_t, Tensor& ggamma_t, Tensor& gbeta_t) {
  const Layout l = layout_of(x_t);
  const T *g = g_t.data<T>(), *x = x_t.data<T>();
  T* gx = gx_t.data<T>();
  const double count = static_cast<double>(l.n * l.s);
  parallel_for(0, l.c, l.grain(), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const double mean = static_cast<double>(mean_t.data<T>()[c]);
      const double invstd = 1 / std::sqrt(static_cast<double>(var_t.data<T>()[c]) + eps);
      double sum_g = 0, sum_gx = 0;  // sum(g), sum(g * (x - mean))
      for (std::int64_t i = 0; i < l.n; ++i) {
        Plane<T> gp(g + l.plane(i, c), l.s), xp(x + l.plane(i, c), l.s);
        sum_g += static_cast<double>(gp.sum());
        sum_gx += static_cast<double>((gp * (xp - static_cast<T>(mean))).sum());
      }
      const double k = static_cast<double>(param_or<T>(gamma, c, T(1))) * invstd;
      const double a = k, b = -k * invstd * invstd * sum_gx / count;
      const double d = -k * sum_g / count - b * mean;
      for (std::int64_t i = 0; i < l.n; ++i) {
        OutPlane<T>(gx + l.plane(i, c), l.s) = Plane<T>(g + l.plane(i, c), l.s) * static_cast<T>(a) +
                                               Plane<T>(x + l.plane(i, c), l.s) * static_cast<T>(b) +
                                               static_cast<T>(d);
      }
      ggamma_t.data<T>()[c] = static_cast<T>(sum_gx * invstd);
      gbeta_t.data<T>()[c] = static_cast<T>(sum_g);
    }
  });
}

}  // namespace

void CpuBackend::batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, Tensor& y,
                            Tensor& mean, Tensor& var) {
  dispatch_floating(x.dtype(), "batch_norm",
                    [&](auto tag) { forward<typename decltype(tag)::type>(x, gamma, beta, eps, y, mean, var); });
}

void CpuBackend::batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& var,
                                     const Tensor& gamma, double eps, Tensor& grad_x, Tensor& grad_gamma,
                                     Tensor& grad_beta) {
  dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto tag) {
    backward<typename decltype(tag)::type>(grad_y, x, mean, var, gamma, eps, grad_x, grad_gamma, grad_beta);
  });
}

}  // namespace dtrain::detail
