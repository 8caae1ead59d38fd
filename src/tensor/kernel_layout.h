// How the CPU and CUDA kernels see their operands, shared so that both backends cut a
// problem the same way: a tensor split around one dim, index dtypes, the planes of a
// pooling, the GEMM operand layouts BLAS libraries read in place, and the kept and reduced
// dims of a reduction. Host code; the plain structs also travel to CUDA kernels by value.
#pragma once

#include "dtrain/tensor/tensor.h"
#include "tensor/cpu/strided_loop.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dtrain::detail {

// A shape as (outer, size, inner) around `dim`: elements before it, its extent, after it.
struct Split {
  std::int64_t outer, size, inner;
};

inline Split split_at(const Shape& shape, std::int64_t dim) {
  Split s{1, shape[dim], 1};
  for (std::int64_t k = 0; k < dim; ++k) s.outer *= shape[k];
  for (std::size_t k = dim + 1; k < shape.size(); ++k) s.inner *= shape[k];
  return s;
}

// Calls f(type_tag<I>) with I the index element type (i64 or i32, checked by the op).
template <class F>
inline void dispatch_index(const Tensor& index, F&& f) {
  if (index.dtype() == DType::i64)
    f(type_tag<std::int64_t>{});
  else
    f(type_tag<std::int32_t>{});
}

// A 2-D pooling of (N, C, H, W) into (N, C, OH, OW): N * C independent planes.
struct Planes {
  std::int64_t count;   // n * c
  std::int64_t h, w;    // input plane
  std::int64_t oh, ow;  // output plane
};

inline Planes planes_of(const Tensor& in, const Tensor& out) {
  return {in.size(0) * in.size(1), in.size(2), in.size(3), out.size(2), out.size(3)};
}

// GEMM operands (B, rows, cols): a BLAS reads a slice in place when one of its two dims
// is unit-stride.
inline bool row_major(const Tensor& t) { return t.size(2) == 1 || t.stride(2) == 1; }
inline bool col_major(const Tensor& t) { return t.size(1) == 1 || t.stride(1) == 1; }

// A BLAS leading dimension must cover the stored row: a stride-0 broadcast of rows (or
// columns) can be read in place only when there is one of them.
inline bool leading_dim_ok(const Tensor& t) {
  if (row_major(t)) return t.size(1) == 1 || t.stride(1) >= std::max<std::int64_t>(1, t.size(2));
  return t.size(2) == 1 || t.stride(2) >= std::max<std::int64_t>(1, t.size(1));
}

// t itself when a BLAS can read its slices in place, else a contiguous copy (of one slice
// only when the batch is a stride-0 broadcast).
inline Tensor gemm_operand(const Tensor& t) {
  if ((row_major(t) || col_major(t)) && leading_dim_ok(t)) return t;
  if (t.size(0) > 1 && t.stride(0) == 0) return t.select(0, 0).contiguous().unsqueeze(0).expand(t.shape());
  return t.contiguous();
}

// A reduction of x over `dims` (sorted, unique) as two loop nests.
struct ReduceNests {
  cpu::LoopNest<1> kept;  // x's strides over the kept dims, in output order
  cpu::LoopNest<1> red;   // x's strides over the reduced dims, largest stride outermost
  std::int64_t outputs = 1;
  std::int64_t count = 1;  // elements per output
};

inline ReduceNests split_dims(const Tensor& x, const std::vector<std::int64_t>& dims) {
  Shape kept_sizes, red_sizes;
  Strides kept_strides, red_strides;
  std::vector<std::size_t> red_order;
  ReduceNests r;
  for (std::size_t d = 0; d < x.shape().size(); ++d) {
    if (std::binary_search(dims.begin(), dims.end(), static_cast<std::int64_t>(d))) {
      red_order.push_back(d);
      r.count *= x.shape()[d];
    } else {
      kept_sizes.push_back(x.shape()[d]);
      kept_strides.push_back(x.strides()[d]);
      r.outputs *= x.shape()[d];
    }
  }
  // The order of reduced dims is free: put the smallest stride innermost (permuted input).
  std::stable_sort(red_order.begin(), red_order.end(),
                   [&](std::size_t a, std::size_t b) { return x.strides()[a] > x.strides()[b]; });
  for (std::size_t d : red_order) {
    red_sizes.push_back(x.shape()[d]);
    red_strides.push_back(x.strides()[d]);
  }
  r.kept = cpu::coalesce<1>(kept_sizes, {&kept_strides});
  r.red = cpu::coalesce<1>(red_sizes, {&red_strides});
  return r;
}

}  // namespace dtrain::detail
