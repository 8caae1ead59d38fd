// CUDA element-wise primitives: copy, fill, unary, binary, compare, where and the in-place
// optimizer updates, mirroring cpu/elementwise.cpp: the math is the functors of
// functors.h (host-device), the iteration is strided_kernel.cuh; this file only chooses
// element types.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/strided_kernel.cuh"
#include "tensor/functors.h"

namespace dtrain::detail {

using gpu::launch_strided;
using gpu::Types;

namespace {

// Calls f(type_tag<T>) for the dtype, over all dtypes when the functor is defined on
// integers and over the floating ones otherwise (the ops layer has checked which).
template <class Functor, class F>
void dispatch_for(DType dtype, F&& f) {
  if constexpr (Functor::kIntegers) dispatch_dtype(dtype, f);
  else dispatch_floating(dtype, Functor::kName, f);
}

// Device code cannot call host lambdas, so the few element functions that are not
// functors.h ops are small functors here.
template <class T>
struct Constant {
  T value;
  DTRAIN_HD T operator()() const { return value; }
};
struct Select {
  template <class T> DTRAIN_HD T operator()(std::uint8_t c, T a, T b) const { return c ? a : b; }
};
// The optimizer updates, self first (as CpuBackend::update).
template <class T>
struct AddScaled {
  T v;
  DTRAIN_HD T operator()(T s, T x) const { return s + v * x; }
};
template <class T>
struct Scale {
  T v;
  DTRAIN_HD T operator()(T s) const { return s * v; }
};
template <class T>
struct AddCMul {
  T v;
  DTRAIN_HD T operator()(T s, T x, T y) const { return s + v * x * y; }
};
template <class T>
struct AddCDiv {
  T v;
  DTRAIN_HD T operator()(T s, T x, T y) const { return s + v * x / y; }
};

}  // namespace

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  cuda::DeviceGuard guard(device_);
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    if (src.raw_data() == dst.raw_data() || src.numel() == 0) return;
    DTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  dispatch_any_dtype(dst.dtype(), [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    dispatch_any_dtype(src.dtype(), [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      launch_strided(stream_, Types<To, From>{}, dst, {&src}, CastTo<To>{});
    });
  });
}

void CudaBackend::fill(Tensor& dst, double value) {
  cuda::DeviceGuard guard(device_);
  dispatch_any_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_strided(stream_, Types<T>{}, dst, {}, Constant<T>{CastTo<T>{}(value)});
  });
}

void CudaBackend::unary(UnaryOp op, const Tensor& x, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  visit_unary(op, [&](auto functor) {
    using Functor = decltype(functor);
    dispatch_for<Functor>(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch_strided(stream_, Types<T, T>{}, out, {&x}, functor);
    });
  });
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  visit_binary(op, [&](auto functor) {
    using Functor = decltype(functor);
    dispatch_for<Functor>(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch_strided(stream_, Types<T, T, T>{}, out, {&a, &b}, functor);
    });
  });
}

void CudaBackend::compare(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  visit_compare(op, [&](auto functor) {
    dispatch_dtype(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch_strided(stream_, Types<std::uint8_t, T, T>{}, out, {&a, &b}, functor);
    });
  });
}

void CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  cuda::DeviceGuard guard(device_);
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_strided(stream_, Types<T, std::uint8_t, T, T>{}, out, {&cond, &a, &b}, Select{});
  });
}

void CudaBackend::update(UpdateOp op, Tensor& self, const Tensor& a, const Tensor& b, double value) {
  cuda::DeviceGuard guard(device_);
  dispatch_floating(self.dtype(), "update", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = static_cast<T>(value);
    switch (op) {
      case UpdateOp::AddScaled:
        launch_strided(stream_, Types<T, T, T>{}, self, {&self, &a}, AddScaled<T>{v});
        return;
      case UpdateOp::MulScalar:
        launch_strided(stream_, Types<T, T>{}, self, {&self}, Scale<T>{v});
        return;
      case UpdateOp::Mul:
        launch_strided(stream_, Types<T, T, T>{}, self, {&self, &a}, MulF{});
        return;
      case UpdateOp::AddCMul:
        launch_strided(stream_, Types<T, T, T, T>{}, self, {&self, &a, &b}, AddCMul<T>{v});
        return;
      case UpdateOp::AddCDiv:
        launch_strided(stream_, Types<T, T, T, T>{}, self, {&self, &a, &b}, AddCDiv<T>{v});
        return;
    }
    DTRAIN_FAIL("update: unknown UpdateOp {}", static_cast<int>(op));
  });
}

}  // namespace dtrain::detail
