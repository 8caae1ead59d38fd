// Rotary position embedding on the CPU: x (B, T, H, D) contiguous, one head's D values at a
// time; the (b, t) rows are split across the pool's threads. See rope_forward in ops.h.
#include "dtrain/core/parallel.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided_loop.h"

#include <algorithm>

namespace dtrain::detail {
namespace {

// inverse rotates by -sin: the backward.
template <class T>
void rotate(const Tensor& x_t, const Tensor& cos_t, const Tensor& sin_t, bool inverse, Tensor& out_t) {
  const std::int64_t batch = x_t.size(0), steps = x_t.size(1), heads = x_t.size(2), d = x_t.size(3), half = d / 2;
  const T *x = x_t.data<T>(), *cos = cos_t.data<T>(), *sin = sin_t.data<T>();
  T* out = out_t.data<T>();
  const std::int64_t per_row = heads * d;  // values of one (b, t)
  const std::int64_t grain = std::max<std::int64_t>(1, cpu::kGrain / std::max<std::int64_t>(per_row, 1));
  parallel_for(0, batch * steps, grain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t bt = b; bt < e; ++bt) {
      const std::int64_t t = bt % steps;
      const T *c = cos + t * half, *s = sin + t * half;
      for (std::int64_t h = 0; h < heads; ++h) {
        const T* xh = x + bt * per_row + h * d;
        T* oh = out + bt * per_row + h * d;
        for (std::int64_t i = 0; i < half; ++i) {
          const T lo = xh[i], hi = xh[i + half];
          const T si = inverse ? -s[i] : s[i];
          oh[i] = lo * c[i] - hi * si;
          oh[i + half] = hi * c[i] + lo * si;
        }
      }
    }
  });
}

}  // namespace

void CpuBackend::rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse, Tensor& out) {
  dispatch_floating(x.dtype(), inverse ? "rope_backward" : "rope_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rotate<T>(x, cos, sin, inverse, out);
  });
}

}  // namespace dtrain::detail
