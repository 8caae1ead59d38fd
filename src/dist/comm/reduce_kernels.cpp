#include "dist/comm/reduce_kernels.h"

#include <algorithm>

namespace dtrain::dist {
namespace {
// No __restrict: dst may alias a. The compiler then vectorizes behind a runtime overlap test.
template <class T, class F>
void combine_loop(T* dst, const T* a, const T* b, std::size_t count, F f) {
  for (std::size_t i = 0; i < count; ++i) dst[i] = f(a[i], b[i]);
}

template <class T>
void combine_typed(T* dst, const T* a, const T* b, std::size_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return combine_loop(dst, a, b, count, [](T x, T y) { return x + y; });
    case ReduceOp::Max: return combine_loop(dst, a, b, count, [](T x, T y) { return std::max(x, y); });
    case ReduceOp::Min: return combine_loop(dst, a, b, count, [](T x, T y) { return std::min(x, y); });
    case ReduceOp::kCount: break;  // check_reduction refuses it
  }
}
}  // namespace

void combine(void* dst, const void* a, const void* b, std::size_t count, DType dtype, ReduceOp op) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    combine_typed(static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), count, op);
  });
}

void divide(void* data, std::size_t count, DType dtype, double divisor) {
  dispatch_floating(dtype, "all_reduce avg", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(data);
    const T d = static_cast<T>(divisor);
    for (std::size_t i = 0; i < count; ++i) p[i] /= d;
  });
}

}  // namespace dtrain::dist
