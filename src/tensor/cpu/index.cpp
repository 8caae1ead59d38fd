// CPU indexing and joining. A contiguous tensor is seen as (outer, size along dim, inner):
// each index then picks a row of `inner` contiguous elements, which the loops copy or add
// as a unit. Index values are range-checked before any element is written.
#include "dtrain/core/parallel.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/kernel_layout.h"

#include <algorithm>
#include <cstring>

namespace dtrain::detail {
namespace {

// Elements per parallel chunk for copies and adds: ~32K amortizes a pool wake-up.
constexpr std::int64_t kChunkElems = 1 << 15;

std::int64_t grain_for(std::int64_t work_per_item) {
  return std::max<std::int64_t>(1, kChunkElems / std::max<std::int64_t>(work_per_item, 1));
}

// Throws naming `op` on the first index outside [0, size).
template <class I>
void check_range(const I* idx, std::int64_t n, std::int64_t size, const char* op) {
  for (std::int64_t i = 0; i < n; ++i) {
    DTRAIN_CHECK(idx[i] >= 0 && idx[i] < size, "{}: index {} is out of range for a dimension of size {}", op,
                 static_cast<std::int64_t>(idx[i]), size);
  }
}

// Runs f(o, i0, i1) over a split of the (outer, inner) positions into ranges of inner
// columns: the loop shape of the accumulating ops, where repeated indices collide along
// `dim` but never across (o, i), so each position belongs to one thread.
template <class F>
void for_each_column_range(std::int64_t outer, std::int64_t inner, std::int64_t work_per_column, F f) {
  parallel_for(0, outer * inner, grain_for(work_per_column), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t o = b / inner; o * inner < e; ++o) {
      f(o, std::max(b, o * inner) - o * inner, std::min(e, (o + 1) * inner) - o * inner);
    }
  });
}

template <class T, class I>
void index_select_kernel(const Tensor& x_t, std::int64_t dim, const I* idx, Tensor& out_t) {
  const Split xs = split_at(x_t.shape(), dim);
  const std::int64_t n = out_t.size(dim);
  const T* x = x_t.data<T>();
  T* out = out_t.data<T>();
  parallel_for(0, xs.outer * n, grain_for(xs.inner), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      const std::int64_t o = r / n, j = r % n;
      std::copy_n(x + (o * xs.size + idx[j]) * xs.inner, xs.inner, out + r * xs.inner);
    }
  });
}

template <class T, class I>
void index_add_kernel(std::int64_t dim, const I* idx, std::int64_t n, const Tensor& src_t, Tensor& out_t) {
  const Split os = split_at(out_t.shape(), dim);
  const T* src = src_t.data<T>();
  T* out = out_t.data<T>();
  for_each_column_range(os.outer, os.inner, n, [&](std::int64_t o, std::int64_t i0, std::int64_t i1) {
    for (std::int64_t j = 0; j < n; ++j) {
      T* dst = out + (o * os.size + idx[j]) * os.inner;
      const T* s = src + (o * n + j) * os.inner;
      for (std::int64_t i = i0; i < i1; ++i) dst[i] += s[i];
    }
  });
}

template <class T, class I>
void gather_kernel(const Tensor& x_t, std::int64_t dim, const I* idx, Tensor& out_t) {
  const Split xs = split_at(x_t.shape(), dim);
  const std::int64_t n = out_t.size(dim);
  const T* x = x_t.data<T>();
  T* out = out_t.data<T>();
  parallel_for(0, xs.outer * n, grain_for(xs.inner), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      const T* plane = x + (r / n) * xs.size * xs.inner;
      const I* row_idx = idx + r * xs.inner;
      T* dst = out + r * xs.inner;
      for (std::int64_t i = 0; i < xs.inner; ++i) dst[i] = plane[row_idx[i] * xs.inner + i];
    }
  });
}

template <class T, class I>
void scatter_add_kernel(std::int64_t dim, const I* idx, const Tensor& src_t, Tensor& out_t) {
  const Split os = split_at(out_t.shape(), dim);
  const std::int64_t n = src_t.size(dim);
  const T* src = src_t.data<T>();
  T* out = out_t.data<T>();
  for_each_column_range(os.outer, os.inner, n, [&](std::int64_t o, std::int64_t i0, std::int64_t i1) {
    T* plane = out + o * os.size * os.inner;
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t row = (o * n + j) * os.inner;
      for (std::int64_t i = i0; i < i1; ++i) plane[idx[row + i] * os.inner + i] += src[row + i];
    }
  });
}

}  // namespace

void CpuBackend::index_select(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) {
  Tensor xc = x.contiguous(), ic = index.contiguous();
  dispatch_index(ic, [&](auto itag) {
    using I = typename decltype(itag)::type;
    const I* idx = ic.data<I>();
    check_range(idx, ic.numel(), x.size(dim), "index_select");
    dispatch_dtype(x.dtype(), [&](auto tag) { index_select_kernel<typename decltype(tag)::type>(xc, dim, idx, out); });
  });
}

// out is zero-filled (or holds earlier sums) and accumulates.
void CpuBackend::index_add(std::int64_t dim, const Tensor& index, const Tensor& src, Tensor& out) {
  Tensor sc = src.contiguous(), ic = index.contiguous();
  dispatch_index(ic, [&](auto itag) {
    using I = typename decltype(itag)::type;
    const I* idx = ic.data<I>();
    check_range(idx, ic.numel(), out.size(dim), "index_add");
    dispatch_dtype(src.dtype(),
                   [&](auto tag) { index_add_kernel<typename decltype(tag)::type>(dim, idx, ic.numel(), sc, out); });
  });
}

void CpuBackend::gather(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) {
  Tensor xc = x.contiguous(), ic = index.contiguous();
  dispatch_index(ic, [&](auto itag) {
    using I = typename decltype(itag)::type;
    const I* idx = ic.data<I>();
    check_range(idx, ic.numel(), x.size(dim), "gather");
    dispatch_dtype(x.dtype(), [&](auto tag) { gather_kernel<typename decltype(tag)::type>(xc, dim, idx, out); });
  });
}

// out is zero-filled (or holds earlier sums) and accumulates.
void CpuBackend::scatter_add(std::int64_t dim, const Tensor& index, const Tensor& src, Tensor& out) {
  Tensor sc = src.contiguous(), ic = index.contiguous();
  dispatch_index(ic, [&](auto itag) {
    using I = typename decltype(itag)::type;
    const I* idx = ic.data<I>();
    check_range(idx, ic.numel(), out.size(dim), "scatter_add");
    dispatch_dtype(src.dtype(), [&](auto tag) { scatter_add_kernel<typename decltype(tag)::type>(dim, idx, sc, out); });
  });
}

// Contiguous inputs are copied row by row (one row: an input's slab of one outer index);
// strided ones go through copy() into their slice of out.
void CpuBackend::cat(const std::vector<Tensor>& inputs, std::int64_t dim, Tensor& out) {
  struct Piece {
    const char* src;
    std::int64_t row_bytes, dst_offset;
  };
  const Split os = split_at(out.shape(), dim);
  const auto elem = static_cast<std::int64_t>(dtype_size(out.dtype()));
  const std::int64_t out_row = os.size * os.inner * elem;
  std::vector<Piece> pieces;
  std::int64_t at = 0;
  for (const Tensor& t : inputs) {
    const std::int64_t len = t.size(dim);
    if (t.numel() > 0 && t.is_contiguous()) {
      pieces.push_back({static_cast<const char*>(t.raw_data()), len * os.inner * elem, at * os.inner * elem});
    } else if (t.numel() > 0) {
      Tensor slot = out.narrow(dim, at, len);
      copy(t, slot);
    }
    at += len;
  }
  char* dst = static_cast<char*>(out.raw_data());
  parallel_for(0, os.outer, grain_for(out_row / elem), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t o = b; o < e; ++o)
      for (const Piece& p : pieces) std::memcpy(dst + o * out_row + p.dst_offset, p.src + o * p.row_bytes, p.row_bytes);
  });
}

}  // namespace dtrain::detail
