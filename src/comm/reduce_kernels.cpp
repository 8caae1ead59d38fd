#include "comm/reduce_kernels.h"

#include "dtrain/core/error.h"

#include <algorithm>
#include <type_traits>

namespace dtrain::dist {
namespace {
// No __restrict: dst may alias a. The compiler then vectorizes behind a runtime overlap test.
template <class T, class F>
void combine_loop(T* dst, const T* a, const T* b, std::size_t count, F f) {
  for (std::size_t i = 0; i < count; ++i) dst[i] = f(a[i], b[i]);
}

// The 16-bit floats compute in float and round once per combine, as NCCL does: a sum over
// n ranks rounds n - 1 times (a ring), which is what a 16-bit all-reduce costs anywhere.
template <class T>
void combine_typed(T* dst, const T* a, const T* b, std::size_t count, ReduceOp op) {
  using C = std::conditional_t<is_half(dtype_v<T>), float, T>;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return combine_loop(dst, a, b, count, [](T x, T y) { return T(C(x) + C(y)); });
    case ReduceOp::Max: return combine_loop(dst, a, b, count, [](T x, T y) { return T(std::max(C(x), C(y))); });
    case ReduceOp::Min: return combine_loop(dst, a, b, count, [](T x, T y) { return T(std::min(C(x), C(y))); });
    case ReduceOp::kCount: break;  // check_reduction refuses it
  }
}
}  // namespace

void combine(void* dst, const void* a, const void* b, std::size_t count, DType dtype, ReduceOp op) {
  dispatch_any_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    combine_typed(static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), count, op);
  });
}

void divide(void* data, std::size_t count, DType dtype, double divisor) {
  DTRAIN_CHECK(is_floating(dtype), "all_reduce avg: expected a floating dtype, got {}", dtype_name(dtype));
  dispatch_any_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_half(dtype_v<T>)) {
      T* p = static_cast<T*>(data);
      const auto d = static_cast<float>(divisor);
      for (std::size_t i = 0; i < count; ++i) p[i] = T(static_cast<float>(p[i]) / d);
    } else if constexpr (std::is_floating_point_v<T>) {
      T* p = static_cast<T*>(data);
      const T d = static_cast<T>(divisor);
      for (std::size_t i = 0; i < count; ++i) p[i] /= d;
    }
  });
}

}  // namespace dtrain::dist
