// Training-mode batch normalization on the CPU, fused per channel. Composed of generic
// ops it takes ~11 passes over the activations forward and ~15 backward; here forward
// reads x twice (mean, then the centred sum of squares, which stays accurate where
// E[x^2] - E[x]^2 would cancel) and writes y once, and backward reads grad_y and x twice
// and writes grad_x once. x is (N, C, S) contiguous: channel c is N planes of S values;
// channels are split across the pool's threads. Sums are accumulated in double per plane.
// f32 activations in the blocked layout (blocked_layout.h) take the same passes in that
// layout, a block of channels at a time, and hand their output on in it. With ReLU fused
// (ops.h), forward applies it as it writes y, and backward masks the gradient by the ReLU
// output as it reads it, in both passes: two passes over the activations fewer forward
// and one backward than batch norm and ReLU apart, and one activation less to keep.
#include "dtrain/core/parallel.h"
#include "tensor/cpu/blocked_layout.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/isa_clones.h"
#include "tensor/functors.h"

#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include <cmath>
#include <type_traits>
#include <vector>

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

template <class T, bool Relu>
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
        OutPlane<T> out(y + l.plane(i, c), l.s);
        out = Plane<T>(x + l.plane(i, c), l.s) * static_cast<T>(scale) + static_cast<T>(shift);
        if constexpr (Relu) out = out.unaryExpr(ReluF{});  // the plane is still in L1
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
//
// With ReLU fused, g is the incoming gradient masked by the ReLU output y: a plane's
// masked gradient goes through `masked`, a plane-sized scratch per thread.
template <class T, bool Relu>
void backward(const Tensor& g_t, const Tensor& x_t, const Tensor& y_t, const Tensor& mean_t, const Tensor& var_t,
              const Tensor& gamma, double eps, Tensor& gx_t, Tensor& ggamma_t, Tensor& gbeta_t) {
  const Layout l = layout_of(x_t);
  const T *g = g_t.data<T>(), *x = x_t.data<T>();
  const T* y = Relu ? y_t.data<T>() : nullptr;
  T* gx = gx_t.data<T>();
  const double count = static_cast<double>(l.n * l.s);
  parallel_for(0, l.c, l.grain(), [&](std::int64_t c0, std::int64_t c1) {
    std::vector<T> masked(Relu ? static_cast<std::size_t>(l.s) : 0);
    // Image i's gradient plane of channel c, masked by the ReLU output when fused.
    const auto grad_plane = [&](std::int64_t i, std::int64_t c) -> const T* {
      if constexpr (Relu) {
        const T *gp = g + l.plane(i, c), *yp = y + l.plane(i, c);
        for (std::int64_t j = 0; j < l.s; ++j) masked[static_cast<std::size_t>(j)] = ReluGradF{}(gp[j], yp[j]);
        return masked.data();
      } else {
        return g + l.plane(i, c);
      }
    };
    for (std::int64_t c = c0; c < c1; ++c) {
      const double mean = static_cast<double>(mean_t.data<T>()[c]);
      const double invstd = 1 / std::sqrt(static_cast<double>(var_t.data<T>()[c]) + eps);
      double sum_g = 0, sum_gx = 0;  // sum(g), sum(g * (x - mean))
      for (std::int64_t i = 0; i < l.n; ++i) {
        Plane<T> gp(grad_plane(i, c), l.s), xp(x + l.plane(i, c), l.s);
        sum_g += static_cast<double>(gp.sum());
        sum_gx += static_cast<double>((gp * (xp - static_cast<T>(mean))).sum());
      }
      const double k = static_cast<double>(param_or<T>(gamma, c, T(1))) * invstd;
      const double a = k, b = -k * invstd * invstd * sum_gx / count;
      const double d = -k * sum_g / count - b * mean;
      for (std::int64_t i = 0; i < l.n; ++i) {
        OutPlane<T>(gx + l.plane(i, c), l.s) = Plane<T>(grad_plane(i, c), l.s) * static_cast<T>(a) +
                                               Plane<T>(x + l.plane(i, c), l.s) * static_cast<T>(b) +
                                               static_cast<T>(d);
      }
      ggamma_t.data<T>()[c] = static_cast<T>(sum_gx * invstd);
      gbeta_t.data<T>()[c] = static_cast<T>(sum_g);
    }
  });
}

// ---- the blocked layout -----------------------------------------------------------
// Image i's channels [cb * B, cb * B + B) are S * B contiguous floats, value s of channel
// cb * B + k at s * B + k: the B lanes of a vector are B channels, so each pass runs over
// a block as over one wide plane, with a sum per lane.
template <int B>
struct Blocks {
  std::int64_t n, c, s;
  std::int64_t blocks() const { return c / B; }
  std::int64_t at(std::int64_t image, std::int64_t block) const { return (image * c + block * B) * s; }
  std::int64_t grain() const { return std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(n * s * B, 1)); }
};

// The loops over one image's block (S * B floats), each compiled per instruction set
// (isa_clones.h): a lane of the block's vectors is a channel.

// sums[k] += the sum of lane k's S values (centred on mean[k] and squared when Squares),
// in float per image as the plain kernel sums a plane, then in double.
template <int B, bool Squares>
DTRAIN_ISA_CLONES void add_lane_sums(const float* block, std::int64_t s, const float* mean, double* sums) {
  float part[B] = {};
  for (std::int64_t j = 0; j < s; ++j) {
    for (int k = 0; k < B; ++k) {
      const float v = block[j * B + k];
      part[k] += Squares ? (v - mean[k]) * (v - mean[k]) : v;
    }
  }
  for (int k = 0; k < B; ++k) sums[k] += static_cast<double>(part[k]);
}

// out = in * scale + shift per lane, through ReLU when fused.
template <int B, bool Relu>
DTRAIN_ISA_CLONES void normalize_block(const float* in, std::int64_t s, const float* scale, const float* shift,
                                       float* out) {
  for (std::int64_t j = 0; j < s; ++j) {
    for (int k = 0; k < B; ++k) {
      const float v = in[j * B + k] * scale[k] + shift[k];
      out[j * B + k] = Relu ? ReluF{}(v) : v;
    }
  }
}

// The gradient at position `at` of a block, masked by the ReLU output y when fused.
template <bool Relu>
inline float masked_grad(const float* g, const float* y, std::int64_t at) {
  if constexpr (Relu) return ReluGradF{}(g[at], y[at]);
  else return g[at];
}

// sum_g[k] += the sum of lane k's gradients, sum_gx[k] += that of gradient * (x - mean[k]).
template <int B, bool Relu>
DTRAIN_ISA_CLONES void add_grad_sums(const float* g, const float* x, const float* y, std::int64_t s, const float* mean,
                                     double* sum_g, double* sum_gx) {
  float part_g[B] = {}, part_gx[B] = {};
  for (std::int64_t j = 0; j < s; ++j) {
    for (int k = 0; k < B; ++k) {
      const float gv = masked_grad<Relu>(g, y, j * B + k);
      part_g[k] += gv;
      part_gx[k] += gv * (x[j * B + k] - mean[k]);
    }
  }
  for (int k = 0; k < B; ++k) {
    sum_g[k] += static_cast<double>(part_g[k]);
    sum_gx[k] += static_cast<double>(part_gx[k]);
  }
}

// out = gradient * a + x * b + d per lane.
template <int B, bool Relu>
DTRAIN_ISA_CLONES void grad_input_block(const float* g, const float* x, const float* y, std::int64_t s, const float* a,
                                        const float* b, const float* d, float* out) {
  for (std::int64_t j = 0; j < s; ++j) {
    for (int k = 0; k < B; ++k) out[j * B + k] = masked_grad<Relu>(g, y, j * B + k) * a[k] + x[j * B + k] * b[k] + d[k];
  }
}

template <int B, bool Relu>
void forward_blocked(const float* x, const Tensor& gamma, const Tensor& beta, double eps, float* y, const Shape& shape,
                     Tensor& mean_t, Tensor& var_t) {
  const Blocks<B> l{shape[0], shape[1], shape[2] * shape[3]};
  const double count = static_cast<double>(l.n * l.s);
  parallel_for(0, l.blocks(), l.grain(), [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t cb = b0; cb < b1; ++cb) {
      double sum[B] = {}, squares[B] = {};
      float mean[B] = {}, scale[B], shift[B];
      for (std::int64_t i = 0; i < l.n; ++i) add_lane_sums<B, false>(x + l.at(i, cb), l.s, mean, sum);
      for (int k = 0; k < B; ++k) mean[k] = static_cast<float>(sum[k] / count);
      for (std::int64_t i = 0; i < l.n; ++i) add_lane_sums<B, true>(x + l.at(i, cb), l.s, mean, squares);
      for (int k = 0; k < B; ++k) {
        const std::int64_t c = cb * B + k;
        const double m = sum[k] / count, var = squares[k] / count;
        const double sc = static_cast<double>(param_or<float>(gamma, c, 1.0f)) / std::sqrt(var + eps);
        scale[k] = static_cast<float>(sc);
        shift[k] = static_cast<float>(static_cast<double>(param_or<float>(beta, c, 0.0f)) - m * sc);
        mean_t.data<float>()[c] = static_cast<float>(m);
        var_t.data<float>()[c] = static_cast<float>(var);
      }
      for (std::int64_t i = 0; i < l.n; ++i) normalize_block<B, Relu>(x + l.at(i, cb), l.s, scale, shift, y + l.at(i, cb));
    }
  });
}

// y: the ReLU output when fused (Relu), in the same layout; its mask applies as g is read.
template <int B, bool Relu>
void backward_blocked(const float* g, const float* x, const float* y, const Tensor& mean_t, const Tensor& var_t,
                      const Tensor& gamma, double eps, float* gx, const Shape& shape, Tensor& ggamma_t,
                      Tensor& gbeta_t) {
  const Blocks<B> l{shape[0], shape[1], shape[2] * shape[3]};
  const double count = static_cast<double>(l.n * l.s);
  parallel_for(0, l.blocks(), l.grain(), [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t cb = b0; cb < b1; ++cb) {
      float mean[B], a[B], b[B], d[B];
      double invstd[B], sum_g[B] = {}, sum_gx[B] = {};
      for (int k = 0; k < B; ++k) {
        mean[k] = mean_t.data<float>()[cb * B + k];
        invstd[k] = 1 / std::sqrt(static_cast<double>(var_t.data<float>()[cb * B + k]) + eps);
      }
      const auto y_block = [&](std::int64_t i) { return Relu ? y + l.at(i, cb) : nullptr; };
      for (std::int64_t i = 0; i < l.n; ++i) {
        add_grad_sums<B, Relu>(g + l.at(i, cb), x + l.at(i, cb), y_block(i), l.s, mean, sum_g, sum_gx);
      }
      for (int k = 0; k < B; ++k) {
        const std::int64_t c = cb * B + k;
        const double kk = static_cast<double>(param_or<float>(gamma, c, 1.0f)) * invstd[k];
        const double bk = -kk * invstd[k] * invstd[k] * sum_gx[k] / count;
        a[k] = static_cast<float>(kk);
        b[k] = static_cast<float>(bk);
        d[k] = static_cast<float>(-kk * sum_g[k] / count - bk * static_cast<double>(mean[k]));
        ggamma_t.data<float>()[c] = static_cast<float>(sum_gx[k] * invstd[k]);
        gbeta_t.data<float>()[c] = static_cast<float>(sum_g[k]);
      }
      for (std::int64_t i = 0; i < l.n; ++i) {
        grad_input_block<B, Relu>(g + l.at(i, cb), x + l.at(i, cb), y_block(i), l.s, a, b, d, gx + l.at(i, cb));
      }
    }
  });
}

// Runs f(std::bool_constant<relu>) for the runtime flag.
template <class F>
void with_relu(bool relu, F f) {
  if (relu) f(std::true_type{});
  else f(std::false_type{});
}

}  // namespace

void CpuBackend::batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, bool relu, Tensor& y,
                            Tensor& mean, Tensor& var) {
  with_relu(relu, [&](auto fused) {
    constexpr bool R = decltype(fused)::value;
    if (const auto bx = onednn::blocked_of(x); bx && onednn::may_block(y)) {
      auto by = std::make_shared<onednn::BlockedActivation>(y.shape(), bx->tag());
      onednn::with_block(*bx, [&](auto block) {
        forward_blocked<decltype(block)::value, R>(bx->floats(), gamma, beta, eps, by->floats(), x.shape(), mean, var);
      });
      onednn::hand_over(y, std::move(by));
      return;
    }
    dispatch_floating(x.dtype(), "batch_norm",
                      [&](auto tag) { forward<typename decltype(tag)::type, R>(x, gamma, beta, eps, y, mean, var); });
  });
}

// The blocked kernel when the gradient, the input and (fused) the ReLU output all hold one
// blocked layout; otherwise the plain one, which reads each through its plain bytes.
void CpuBackend::batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& relu_y, const Tensor& mean,
                                     const Tensor& var, const Tensor& gamma, double eps, Tensor& grad_x,
                                     Tensor& grad_gamma, Tensor& grad_beta) {
  with_relu(relu_y.defined(), [&](auto fused) {
    constexpr bool R = decltype(fused)::value;
    const auto bg = onednn::blocked_of(grad_y), bx = onednn::blocked_of(x);
    const auto by = R ? onednn::blocked_of(relu_y) : nullptr;
    if (bg && bx && bg->same_layout(*bx) && (!R || (by && by->same_layout(*bx))) && onednn::may_block(grad_x)) {
      auto bgx = std::make_shared<onednn::BlockedActivation>(grad_x.shape(), bx->tag());
      onednn::with_block(*bx, [&](auto block) {
        backward_blocked<decltype(block)::value, R>(bg->floats(), bx->floats(), R ? by->floats() : nullptr, mean, var,
                                                    gamma, eps, bgx->floats(), x.shape(), grad_gamma, grad_beta);
      });
      onednn::hand_over(grad_x, std::move(bgx));
      return;
    }
    dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto tag) {
      backward<typename decltype(tag)::type, R>(grad_y, x, relu_y, mean, var, gamma, eps, grad_x, grad_gamma,
                                                grad_beta);
    });
  });
}

}  // namespace dtrain::detail
