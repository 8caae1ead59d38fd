// CPU copy (with dtype conversion, between any strides) and fill. The iteration is in
// strided_loop.h.
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided_loop.h"
#include "tensor/functors.h"

#include <cstring>

namespace dtrain::detail {

using cpu::cpu_kernel;

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    const auto* from = static_cast<const char*>(src.raw_data());
    auto* to = static_cast<char*>(dst.raw_data());
    if (from == to) return;
    const auto elem = static_cast<std::int64_t>(dtype_size(src.dtype()));
    parallel_for(0, src.numel(), 4 * cpu::kGrain, [&](std::int64_t b, std::int64_t e) {
      std::memcpy(to + b * elem, from + b * elem, static_cast<std::size_t>((e - b) * elem));
    });
    return;
  }
  dispatch_any_dtype(dst.dtype(), [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    dispatch_any_dtype(src.dtype(), [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      cpu_kernel<To, From>(dst, {&src}, CastTo<To>{});
    });
  });
}

void CpuBackend::fill(Tensor& dst, double value) {
  dispatch_any_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = CastTo<T>{}(value);
    cpu_kernel<T>(dst, {}, [v] { return v; });
  });
}

}  // namespace dtrain::detail
