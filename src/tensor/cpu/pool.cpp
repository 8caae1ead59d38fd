// CPU 2-D pooling (max, average, adaptive average) and their backwards. Every (n, c) plane
// is independent, so planes are split across threads; a backward writes only into its own
// plane of grad_x, which makes it race-free without atomics. Max pooling also runs on
// activations held in the blocked layout (blocked_layout.h), keeping them blocked.
#include "dtrain/core/parallel.h"
#include "tensor/cpu/blocked_layout.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/kernel_layout.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

namespace dtrain::detail {
namespace {

// Window reads per parallel chunk: ~32K, enough to amortize a pool wake-up.
constexpr std::int64_t kChunkWork = 1 << 15;

// f(plane) for every plane, split across threads; work = element reads per plane.
template <class F>
void for_each_plane(std::int64_t planes, std::int64_t work, F f) {
  parallel_for(0, planes, std::max<std::int64_t>(1, kChunkWork / std::max<std::int64_t>(work, 1)),
               [&](std::int64_t b, std::int64_t e) {
                 for (std::int64_t plane = b; plane < e; ++plane) f(plane);
               });
}

// The input rows [h0, h1) and columns [w0, w1) under output (y, x), and the divisor of an
// average over it (PyTorch: with count_include_pad the padding counts, but not the part
// of the window past the padding).
struct Window {
  std::int64_t h0, h1, w0, w1;
  std::int64_t divisor;
};

inline Window pool_window(const Planes& g, const Pool2dParams& p, std::int64_t y, std::int64_t x) {
  std::int64_t h0 = y * p.stride_h - p.pad_h, w0 = x * p.stride_w - p.pad_w;
  std::int64_t h1 = std::min(h0 + p.kernel_h, g.h + p.pad_h), w1 = std::min(w0 + p.kernel_w, g.w + p.pad_w);
  const std::int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = std::max<std::int64_t>(h0, 0), w0 = std::max<std::int64_t>(w0, 0);
  h1 = std::min(h1, g.h), w1 = std::min(w1, g.w);
  return {h0, h1, w0, w1, p.count_include_pad ? padded : (h1 - h0) * (w1 - w0)};
}

// PyTorch's adaptive windows: [floor(i * in / out), ceil((i + 1) * in / out)).
Window adaptive_window(const Planes& g, std::int64_t y, std::int64_t x) {
  Window win{y * g.h / g.oh, ((y + 1) * g.h + g.oh - 1) / g.oh, x * g.w / g.ow, ((x + 1) * g.w + g.ow - 1) / g.ow, 0};
  win.divisor = (win.h1 - win.h0) * (win.w1 - win.w0);
  return win;
}

// The maximum of one window of a plane (row length w) and its flat index; only real
// input competes, so padding never wins. The compares are branch-free selects (on real
// data each is a coin flip that a branch would mispredict); a window holding a NaN, rare,
// is rescanned so that the NaN wins, as in PyTorch.
template <class T>
std::pair<T, std::int64_t> window_max(const T* in, std::int64_t w, const Window& win) {
  T best = -std::numeric_limits<T>::infinity();
  std::int64_t arg = win.h0 * w + win.w0;
  bool nan = false;
  for (std::int64_t h = win.h0; h < win.h1; ++h) {
    for (std::int64_t c = win.w0; c < win.w1; ++c) {
      const T v = in[h * w + c];
      const bool greater = v > best;
      best = greater ? v : best;
      arg = greater ? h * w + c : arg;
      nan |= v != v;
    }
  }
  if (nan) [[unlikely]] {
    for (std::int64_t h = win.h0; h < win.h1; ++h)
      for (std::int64_t c = win.w0; c < win.w1; ++c)
        if (in[h * w + c] != in[h * w + c]) return {in[h * w + c], h * w + c};
  }
  return {best, arg};
}

template <class T>
void max_pool(const Tensor& x_t, const Pool2dParams& p, Tensor& out_t, Tensor& idx_t) {
  const Planes g = planes_of(x_t, out_t);
  const T* x = x_t.data<T>();
  T* out = out_t.data<T>();
  std::int64_t* idx = idx_t.data<std::int64_t>();
  for_each_plane(g.count, g.oh * g.ow * p.kernel_h * p.kernel_w, [&](std::int64_t plane) {
    const T* in = x + plane * g.h * g.w;
    const std::int64_t base = plane * g.oh * g.ow;
    for (std::int64_t y = 0; y < g.oh; ++y) {
      for (std::int64_t xo = 0; xo < g.ow; ++xo) {
        std::tie(out[base + y * g.ow + xo], idx[base + y * g.ow + xo]) = window_max(in, g.w, pool_window(g, p, y, xo));
      }
    }
  });
}

template <class T>
void max_pool_backward(const Tensor& go_t, const Tensor& idx_t, Tensor& gx_t) {
  const Planes g = planes_of(gx_t, go_t);
  const T* go = go_t.data<T>();
  const std::int64_t* idx = idx_t.data<std::int64_t>();
  T* gx = gx_t.data<T>();
  const std::int64_t plane_size = g.h * g.w, out_size = g.oh * g.ow;
  for_each_plane(g.count, out_size + plane_size, [&](std::int64_t plane) {
    T* dst = gx + plane * plane_size;
    std::fill(dst, dst + plane_size, T(0));  // grad_x comes uninitialized
    for (std::int64_t o = plane * out_size; o < (plane + 1) * out_size; ++o) {
      DTRAIN_CHECK(idx[o] >= 0 && idx[o] < plane_size,
                   "max_pool2d_backward: index {} out of range for an input plane of {} elements", idx[o], plane_size);
      dst[idx[o]] += go[o];
    }
  });
}

// ---- the blocked layout -----------------------------------------------------------
// Image i's channels [cb * B, cb * B + B) are H * W * B contiguous floats, value s of
// channel cb * B + k at s * B + k: block b of the tensor holds planes b * B .. b * B + B - 1,
// and a window's position holds one vector of B lanes, one per plane. The indices stay
// plain (N, C, OH, OW) i64, the public contract. Plane indices are tracked in 32 bits, so
// the caller takes this path only for planes of fewer than 2^31 elements.

// Four floats or 32-bit ints as one GCC vector, the width of the baseline SSE2 register:
// compares and selects on it compile to single instructions (wider GCC vectors are split
// into scalar code for the selects), and a block of B lanes is B / 4 of them.
typedef float F4 __attribute__((vector_size(16)));
typedef std::int32_t I4 __attribute__((vector_size(16)));

template <int B>
void max_pool_blocked(const float* x, const Planes& g, const Pool2dParams& p, float* out, std::int64_t* idx) {
  constexpr int V = B / 4;
  const std::int64_t out_size = g.oh * g.ow;
  for_each_plane(g.count / B, out_size * p.kernel_h * p.kernel_w * B, [&](std::int64_t block) {
    const float* in = x + block * g.h * g.w * B;
    float* dst = out + block * out_size * B;
    std::int64_t* dst_idx = idx + block * B * out_size;
    for (std::int64_t y = 0; y < g.oh; ++y) {
      for (std::int64_t xo = 0; xo < g.ow; ++xo) {
        const Window win = pool_window(g, p, y, xo);
        F4 best[V];
        I4 arg[V];
        for (int j = 0; j < V; ++j) best[j] = F4{} - std::numeric_limits<float>::infinity();
        for (int j = 0; j < V; ++j) arg[j] = I4{} + static_cast<std::int32_t>(win.h0 * g.w + win.w0);
        for (std::int64_t h = win.h0; h < win.h1; ++h) {
          for (std::int64_t c = win.w0; c < win.w1; ++c) {
            const auto pos = static_cast<std::int32_t>(h * g.w + c);
            const float* at = in + pos * std::int64_t{B};
            for (int j = 0; j < V; ++j) {
              F4 v;
              std::memcpy(&v, at + 4 * j, sizeof v);
              // As the plain kernel: the first maximum, or the first NaN, wins.
              const I4 take = (v > best[j]) | ((v != v) & (best[j] == best[j]));
              best[j] = take ? v : best[j];
              arg[j] = take ? I4{} + pos : arg[j];
            }
          }
        }
        const std::int64_t o = y * g.ow + xo;
        std::memcpy(dst + o * B, best, sizeof best);
        std::int32_t args[B];
        std::memcpy(args, arg, sizeof arg);
        for (int k = 0; k < B; ++k) dst_idx[k * out_size + o] = args[k];
      }
    }
  });
}

template <int B>
void max_pool_backward_blocked(const float* go, const std::int64_t* idx, const Planes& g, float* gx) {
  const std::int64_t plane_size = g.h * g.w, out_size = g.oh * g.ow;
  for_each_plane(g.count / B, (out_size + plane_size) * B, [&](std::int64_t block) {
    float* dst = gx + block * plane_size * B;
    std::fill(dst, dst + plane_size * B, 0.0f);
    const float* src = go + block * out_size * B;
    const std::int64_t* src_idx = idx + block * B * out_size;
    for (std::int64_t o = 0; o < out_size; ++o) {
      for (int k = 0; k < B; ++k) {
        const std::int64_t i = src_idx[k * out_size + o];
        DTRAIN_CHECK(i >= 0 && i < plane_size,
                     "max_pool2d_backward: index {} out of range for an input plane of {} elements", i, plane_size);
        dst[i * B + k] += src[o * B + k];
      }
    }
  });
}

// Average pooling forward, over the windows that `window(y, x)` gives.
template <class T, class WindowFn>
void average(const Tensor& x_t, Tensor& out_t, std::int64_t window_reads, WindowFn window) {
  const Planes g = planes_of(x_t, out_t);
  const T* x = x_t.data<T>();
  T* out = out_t.data<T>();
  for_each_plane(g.count, g.oh * g.ow * window_reads, [&](std::int64_t plane) {
    const T* in = x + plane * g.h * g.w;
    T* dst = out + plane * g.oh * g.ow;
    for (std::int64_t y = 0; y < g.oh; ++y) {
      for (std::int64_t xo = 0; xo < g.ow; ++xo) {
        const Window win = window(g, y, xo);
        T sum = 0;
        for (std::int64_t h = win.h0; h < win.h1; ++h)
          for (std::int64_t w = win.w0; w < win.w1; ++w) sum += in[h * g.w + w];
        dst[y * g.ow + xo] = sum / static_cast<T>(win.divisor);
      }
    }
  });
}

// Its adjoint: each output gradient spread evenly over its window's input elements.
template <class T, class WindowFn>
void average_backward(const Tensor& go_t, Tensor& gx_t, std::int64_t window_reads, WindowFn window) {
  const Planes g = planes_of(gx_t, go_t);
  const T* go = go_t.data<T>();
  T* gx = gx_t.data<T>();
  for_each_plane(g.count, g.oh * g.ow * window_reads, [&](std::int64_t plane) {
    const T* src = go + plane * g.oh * g.ow;
    T* dst = gx + plane * g.h * g.w;
    for (std::int64_t y = 0; y < g.oh; ++y) {
      for (std::int64_t xo = 0; xo < g.ow; ++xo) {
        const Window win = window(g, y, xo);
        const T share = src[y * g.ow + xo] / static_cast<T>(win.divisor);
        for (std::int64_t h = win.h0; h < win.h1; ++h)
          for (std::int64_t w = win.w0; w < win.w1; ++w) dst[h * g.w + w] += share;
      }
    }
  });
}

// Reads per adaptive window, rounded up: ceil(in / out) + 1 rows and columns at most.
std::int64_t adaptive_reads(const Tensor& in, const Tensor& out) {
  return (in.size(2) / out.size(2) + 1) * (in.size(3) / out.size(3) + 1);
}

}  // namespace

// A blocked input gives a blocked output, read and written as it is.
void CpuBackend::max_pool2d(const Tensor& x, const Pool2dParams& p, Tensor& out, Tensor& indices) {
  if (const auto bx = onednn::blocked_of(x);
      bx && onednn::may_block(out) && x.size(2) * x.size(3) <= std::numeric_limits<std::int32_t>::max()) {
    auto bo = std::make_shared<onednn::BlockedActivation>(out.shape(), bx->tag());
    onednn::with_block(*bx, [&](auto block) {
      max_pool_blocked<decltype(block)::value>(bx->floats(), planes_of(x, out), p, bo->floats(),
                                               indices.data<std::int64_t>());
    });
    onednn::hand_over(out, std::move(bo));
    return;
  }
  Tensor xc = x.contiguous();
  dispatch_floating(x.dtype(), "max_pool2d",
                    [&](auto tag) { max_pool<typename decltype(tag)::type>(xc, p, out, indices); });
}

// A blocked gradient gives a blocked grad_x, for the blocked ReLU or convolution before.
void CpuBackend::max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, Tensor& grad_x) {
  Tensor ic = indices.contiguous();
  if (const auto bg = onednn::blocked_of(grad_out); bg && onednn::may_block(grad_x)) {
    auto bgx = std::make_shared<onednn::BlockedActivation>(grad_x.shape(), bg->tag());
    onednn::with_block(*bg, [&](auto block) {
      max_pool_backward_blocked<decltype(block)::value>(bg->floats(), ic.data<std::int64_t>(),
                                                        planes_of(grad_x, grad_out), bgx->floats());
    });
    onednn::hand_over(grad_x, std::move(bgx));
    return;
  }
  Tensor goc = grad_out.contiguous();
  dispatch_floating(grad_out.dtype(), "max_pool2d_backward",
                    [&](auto tag) { max_pool_backward<typename decltype(tag)::type>(goc, ic, grad_x); });
}

void CpuBackend::avg_pool2d(const Tensor& x, const Pool2dParams& p, Tensor& out) {
  Tensor xc = x.contiguous();
  dispatch_floating(x.dtype(), "avg_pool2d", [&](auto tag) {
    average<typename decltype(tag)::type>(
        xc, out, p.kernel_h * p.kernel_w,
        [&](const Planes& g, std::int64_t y, std::int64_t xo) { return pool_window(g, p, y, xo); });
  });
}

void CpuBackend::avg_pool2d_backward(const Tensor& grad_out, const Pool2dParams& p, Tensor& grad_x) {
  Tensor goc = grad_out.contiguous();
  dispatch_floating(grad_out.dtype(), "avg_pool2d_backward", [&](auto tag) {
    average_backward<typename decltype(tag)::type>(
        goc, grad_x, p.kernel_h * p.kernel_w,
        [&](const Planes& g, std::int64_t y, std::int64_t xo) { return pool_window(g, p, y, xo); });
  });
}

void CpuBackend::adaptive_avg_pool2d(const Tensor& x, Tensor& out) {
  Tensor xc = x.contiguous();
  dispatch_floating(x.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    average<typename decltype(tag)::type>(xc, out, adaptive_reads(x, out), adaptive_window);
  });
}

void CpuBackend::adaptive_avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x) {
  Tensor goc = grad_out.contiguous();
  dispatch_floating(grad_out.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    average_backward<typename decltype(tag)::type>(goc, grad_x, adaptive_reads(grad_x, grad_out), adaptive_window);
  });
}

}  // namespace dtrain::detail
