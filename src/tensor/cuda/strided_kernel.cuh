// Element-wise iteration on a CUDA device: out[i] = f(in_0[i], ..., in_{N-1}[i]) over
// out's shape, for operands of any strides whose inputs are already expanded to out's
// shape (stride 0 on broadcast dims), as the CPU loop (cpu/strided_loop.h) gets them.
// One generic kernel, instantiated per functor and element types: one thread per element
// (a grid-stride loop covers any size), its operands located by offset_calculator.h.
#pragma once

#include "dtrain/core/cuda/check.h"
#include "dtrain/tensor/tensor.h"
#include "tensor/cuda/offset_calculator.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

namespace dtrain::detail::gpu {

inline constexpr int kMaxInputs = 3;  // where and addcmul/addcdiv take three
inline constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; beyond that threads loop.
inline constexpr std::int64_t kMaxBlocks = 65536;

// Operand base pointers, typed back in the kernel from the template's element types.
struct Pointers {
  void* out = nullptr;
  const void* in[kMaxInputs] = {};
};

template <class Out, class... In, class F, std::size_t... I>
__device__ void apply(const Pointers& p, const std::int64_t* off, const F& f, std::index_sequence<I...>) {
  static_cast<Out*>(p.out)[off[0]] = f(static_cast<const In*>(p.in[I])[off[I + 1]]...);
}

// (A __global__ template's pack must come last, so F comes first here.)
template <class F, class Out, class... In>
__global__ void strided_kernel(std::int64_t n, OffsetCalculator<sizeof...(In) + 1> calc, Pointers p, F f) {
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    std::int64_t off[sizeof...(In) + 1];
    calc.offsets(i, off);
    apply<Out, In...>(p, off, f, std::index_sequence_for<In...>{});
  }
}

// The element types of an element-wise call: out's, then the inputs'. (Passed as a value
// rather than as explicit template arguments, which nvcc's front end mis-deduces when
// a pack is followed by a deduced parameter.)
template <class Out, class... In>
struct Types {};

// Queues out[i] = f(inputs[0][i], ...) on `stream`, with Out and In... the element types
// of out and the inputs (the caller dispatched on dtypes; data<T>() checks them). out may
// alias an input exactly (same data, same strides): each element is read, then written,
// by one thread.
template <class F, class Out, class... In>
void launch_strided(cudaStream_t stream, Types<Out, In...>, Tensor& out,
                    const std::array<const Tensor*, sizeof...(In)>& inputs, F f) {
  static_assert(sizeof...(In) <= kMaxInputs, "raise kMaxInputs");
  const std::int64_t n = out.numel();
  if (n == 0) return;
  const auto calc = make_offset_calculator<sizeof...(In) + 1>(out, inputs);
  Pointers p;
  p.out = out.data<Out>();
  [&]<std::size_t... I>(std::index_sequence<I...>) { ((p.in[I] = inputs[I]->template data<In>()), ...); }(
      std::index_sequence_for<In...>{});

  const auto blocks = static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks));
  strided_kernel<F, Out, In...><<<blocks, kThreads, 0, stream>>>(n, calc, p, f);
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dtrain::detail::gpu
