// Where each operand's element lies for a linear index of an element-wise op: the indexing
// of the CUDA strided kernel (strided_kernel.cuh). Plain C++ with host-device methods, so
// that the tests check it on the host, without a GPU.
//
// The host first merges dims the same way the CPU loop does (cpu::coalesce), so that
// contiguous operands leave one dim and a thread's offsets cost one multiply; otherwise the
// linear index is divided down by each remaining dim, innermost first.
#pragma once

#include "dtrain/core/host_device.h"
#include "dtrain/tensor/tensor.h"
#include "tensor/cpu/strided_loop.h"

#include <array>
#include <cstddef>
#include <cstdint>

namespace dtrain::detail::gpu {

// Dims left after merging that the calculator handles (more is an error; tensors that
// deep do not occur in the layers).
inline constexpr int kMaxDims = 16;

// N operands, operand 0 being out. Passed to kernels by value (at most about 650 bytes of
// kernel parameters for four operands).
template <std::size_t N>
struct OffsetCalculator {
  int ndim = 0;
  std::int64_t sizes[kMaxDims];
  std::int64_t strides[kMaxDims][N];

  // Element offsets of the row-major element `linear` of out's shape.
  DTRAIN_HD void offsets(std::int64_t linear, std::int64_t (&off)[N]) const {
    for (std::size_t k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d > 0; --d) {
      const std::int64_t i = linear % sizes[d];
      linear /= sizes[d];
      for (std::size_t k = 0; k < N; ++k) off[k] += i * strides[d][k];
    }
    for (std::size_t k = 0; k < N; ++k) off[k] += linear * strides[0][k];
  }
};

// The calculator for out and inputs expanded to out's shape; throws dtrain::Error when
// more than kMaxDims dims remain after merging.
template <std::size_t N>
OffsetCalculator<N> make_offset_calculator(const Tensor& out, const std::array<const Tensor*, N - 1>& inputs) {
  std::array<const Strides*, N> strides;
  strides[0] = &out.strides();
  for (std::size_t k = 1; k < N; ++k) strides[k] = &inputs[k - 1]->strides();
  const cpu::LoopNest<N> nest = cpu::coalesce(out.shape(), strides);
  const auto ndim = static_cast<int>(nest.sizes.size());
  DTRAIN_CHECK(ndim <= kMaxDims, "cuda: element-wise kernels take up to {} dims after merging, got {} (shape {})",
               kMaxDims, ndim, shape_str(out.shape()));
  OffsetCalculator<N> calc{};
  calc.ndim = ndim;
  for (int d = 0; d < ndim; ++d) {
    calc.sizes[d] = nest.sizes[d];
    for (std::size_t k = 0; k < N; ++k) calc.strides[d][k] = nest.strides[k][d];
  }
  return calc;
}

}  // namespace dtrain::detail::gpu
