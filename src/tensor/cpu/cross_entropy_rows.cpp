// Softmax cross-entropy of rows of logits, in place (softmax_cross_entropy_rows_ in ops.h): per
// row, the maximum (one read), then exp(x - max) written over x while summing it (one read and
// one write, the exponential vectorized: vector_exp.h), then one element at the target. The
// composed ops it replaces (subtract the maximum, gather, exp, sum, a scatter into a zeroed
// N x V tensor and a subtraction of it) made seven passes over the fused head's N x V logits,
// with libm's exp per element.
//
// Sums run in the input's dtype over interleaved accumulators (lane_sum.h), so the loops
// vectorize in the clones and every clone computes the same bits. A NaN logit makes its row's sum, and so its loss, NaN.
#include "dtrain/core/parallel.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/isa_clones.h"
#include "tensor/cpu/lane_sum.h"
#include "tensor/cpu/strided_loop.h"
#include "tensor/cpu/vector_exp.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dtrain::detail {
namespace {

using cpu::kLanes;

// f32 through the vectorizable exp; f64 through libm's.
[[gnu::always_inline]] inline float exp_of(float x) { return cpu::vector_exp(x); }
[[gnu::always_inline]] inline double exp_of(double x) { return std::exp(x); }

template <class T>
DTRAIN_ISA_CLONES void cross_entropy_row(T* __restrict x, std::int64_t v, std::int64_t target, T* sum_out,
                                         T* log_prob_out) {
  T top[kLanes];
  std::fill(top, top + kLanes, -std::numeric_limits<T>::infinity());
  std::int64_t j = 0;
  for (; j + kLanes <= v; j += kLanes)
    for (std::int64_t l = 0; l < kLanes; ++l) top[l] = x[j + l] > top[l] ? x[j + l] : top[l];
  for (; j < v; ++j) top[0] = x[j] > top[0] ? x[j] : top[0];
  T m = top[0];
  for (T t : top) m = t > m ? t : m;
  const T shifted_target = x[target] - m;

  const T s = cpu::lane_sum<T>(v, [&](std::int64_t j) {
    const T e = exp_of(x[j] - m);
    x[j] = e;
    return e;
  });
  x[target] -= s;  // E - s Y: P - 1 at the target keeps its precision once divided by s
  *sum_out = s;
  *log_prob_out = shifted_target - std::log(s);
}

template <class T, class I>
void cross_entropy_rows(Tensor& logits, const Tensor& targets, Tensor& sums, Tensor& log_prob) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  T* x = logits.data<T>();
  const I* t = targets.data<I>();
  T *s = sums.data<T>(), *lp = log_prob.data<T>();
  parallel_for(0, n, std::max<std::int64_t>(1, cpu::kGrain / v), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t row = r0; row < r1; ++row)
      cross_entropy_row<T>(x + row * v, v, static_cast<std::int64_t>(t[row]), s + row, lp + row);
  });
}

}  // namespace

void CpuBackend::softmax_cross_entropy_rows(Tensor& logits, const Tensor& targets, Tensor& sums, Tensor& log_prob) {
  dispatch_floating(logits.dtype(), "softmax_cross_entropy_rows_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (targets.dtype() == DType::i64) cross_entropy_rows<T, std::int64_t>(logits, targets, sums, log_prob);
    else cross_entropy_rows<T, std::int32_t>(logits, targets, sums, log_prob);
  });
}

}  // namespace dtrain::detail
