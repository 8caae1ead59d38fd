// CPU element-wise primitives: copy, fill, unary, binary, compare, where and the in-place
// optimizer updates. The math is in functors.h, the iteration in strided_loop.h; this
// file only chooses element types.
#include "tensor/cpu/blocked_layout.h"
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

namespace {

// Calls f(type_tag<T>) for the dtype, over all dtypes when the functor is defined on
// integers and over the floating ones otherwise (the ops layer has checked which).
template <class Functor, class F>
void dispatch_for(DType dtype, F&& f) {
  if constexpr (Functor::kIntegers) dispatch_dtype(dtype, f);
  else dispatch_floating(dtype, Functor::kName, f);
}

// Element-wise ops on blocked activations (blocked_layout.h): when every input holds the
// same blocked layout, has out's shape and out may be handed over so, the op runs position
// by position on the blocked bytes into a new blocked output, and returns true. (The old
// bytes are read from their own buffer, so this holds for out == an input too.)
using onednn::BlockedActivation;

std::shared_ptr<BlockedActivation> blocked_result(Tensor& out, const BlockedActivation* a, const BlockedActivation* b) {
  if (a == nullptr || (b != nullptr && !b->same_layout(*a)) || a->shape() != out.shape() || !onednn::may_block(out)) {
    return nullptr;
  }
  return std::make_shared<BlockedActivation>(out.shape(), a->tag());
}

template <class Functor>
bool unary_blocked(Functor f, const Tensor& x, Tensor& out) {
  const auto bx = onednn::blocked_of(x);
  const auto result = blocked_result(out, bx.get(), nullptr);
  if (!result) return false;
  const float* in = bx->floats();
  float* o = result->floats();
  parallel_for(0, out.numel(), cpu::kGrain, [&](std::int64_t b, std::int64_t e) {
    cpu::map_contiguous(e - b, o + b, f, in + b);
  });
  onednn::hand_over(out, result);
  return true;
}

template <class Functor>
bool binary_blocked(Functor f, const Tensor& a, const Tensor& b, Tensor& out) {
  const auto ba = onednn::blocked_of(a), bb = onednn::blocked_of(b);
  if (!bb) return false;
  const auto result = blocked_result(out, ba.get(), bb.get());
  if (!result) return false;
  const float *x = ba->floats(), *y = bb->floats();
  float* o = result->floats();
  parallel_for(0, out.numel(), cpu::kGrain, [&](std::int64_t s, std::int64_t e) {
    cpu::map_contiguous(e - s, o + s, f, x + s, y + s);
  });
  onednn::hand_over(out, result);
  return true;
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& x, Tensor& out) {
  visit_unary(op, [&](auto functor) {
    if (out.dtype() == DType::f32 && unary_blocked(functor, x, out)) return;
    using Functor = decltype(functor);
    dispatch_for<Functor>(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      cpu_kernel<T, T>(out, {&x}, functor);
    });
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  visit_binary(op, [&](auto functor) {
    if (out.dtype() == DType::f32 && binary_blocked(functor, a, b, out)) return;
    using Functor = decltype(functor);
    dispatch_for<Functor>(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      cpu_kernel<T, T, T>(out, {&a, &b}, functor);
    });
  });
}

void CpuBackend::compare(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  visit_compare(op, [&](auto functor) {
    dispatch_dtype(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      cpu_kernel<std::uint8_t, T, T>(out, {&a, &b}, functor);
    });
  });
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu_kernel<T, std::uint8_t, T, T>(out, {&cond, &a, &b}, [](std::uint8_t c, T u, T v) { return c ? u : v; });
  });
}

void CpuBackend::update(UpdateOp op, Tensor& self, const Tensor& a, const Tensor& b, double value) {
  dispatch_floating(self.dtype(), "update", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = static_cast<T>(value);
    switch (op) {
      case UpdateOp::AddScaled:
        cpu_kernel<T, T, T>(self, {&self, &a}, [v](T s, T x) { return s + v * x; });
        return;
      case UpdateOp::MulScalar:
        cpu_kernel<T, T>(self, {&self}, [v](T s) { return s * v; });
        return;
      case UpdateOp::Mul:
        cpu_kernel<T, T, T>(self, {&self, &a}, [](T s, T x) { return s * x; });
        return;
      case UpdateOp::AddCMul:
        cpu_kernel<T, T, T, T>(self, {&self, &a, &b}, [v](T s, T x, T y) { return s + v * x * y; });
        return;
      case UpdateOp::AddCDiv:
        cpu_kernel<T, T, T, T>(self, {&self, &a, &b}, [v](T s, T x, T y) { return s + v * x / y; });
        return;
    }
    DTRAIN_FAIL("update: unknown UpdateOp {}", static_cast<int>(op));
  });
}

}  // namespace dtrain::detail
