// Element-wise iteration on the CPU: out[i] = f(in_0[i], ..., in_{N-1}[i]) over out's
// shape, for operands of any strides whose inputs are already expanded to out's shape
// (stride 0 on broadcast dims). The loop nest is coalesced first, so that contiguous
// operands become one flat loop; the innermost dim then runs as a tight loop, specialised
// for "all contiguous" (which the compiler vectorises) and "one input is a broadcast
// scalar, the rest contiguous", with a plain strided loop for everything else. An
// operand read (or written) transposed makes the two innermost dims go in square tiles.
#pragma once

#include "dtrain/core/parallel.h"
#include "dtrain/tensor/tensor.h"
#include "tensor/cpu/isa_clones.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace dtrain::detail::cpu {

// Elements per parallel chunk: enough work that handing a range to a pool thread is noise.
inline constexpr std::int64_t kGrain = 32768;
// Side of the square tiles used for transposed operands (see has_transposed_operand).
// Rows of a large matrix lie pages apart, so a tile touches about one page per row and
// per column: small tiles keep that within the L1 TLB (8 measured ~5x faster than no
// tiling on a 2048x2048 transpose, 16 and 64 progressively slower).
inline constexpr std::int64_t kTile = 8;

// out[i] = f(in[i]...) for i < n over contiguous operands (out may be one of the inputs),
// compiled per instruction set (isa_clones.h) when every operand is f32.
template <class Out, class... In, class F>
DTRAIN_ISA_CLONES void map_f32(std::int64_t n, Out* out, F& f, const In*... in) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(in[i]...);
}
// Runs shorter than this stay inline: a clone is called through the ifunc, never inlined,
// and a row of a few elements (a bias added to a narrow matrix) would pay a call per row.
inline constexpr std::int64_t kMinClonedRun = 64;
template <class Out, class... In, class F>
inline void map_contiguous(std::int64_t n, Out* out, F& f, const In*... in) {
  if constexpr (std::is_same_v<Out, float> && (std::is_same_v<In, float> && ...)) {
    if (n >= kMinClonedRun) return map_f32(n, out, f, in...);
  }
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(in[i]...);
}

// A loop nest over N operands: sizes outermost first, and each operand's strides (elements).
template <std::size_t N>
struct LoopNest {
  Shape sizes;
  std::array<Strides, N> strides;
};

// Drops size-1 dims and merges each dim into the one outside it when every operand steps
// through the pair as through a single dim. Always leaves at least one dim.
template <std::size_t N>
LoopNest<N> coalesce(const Shape& shape, const std::array<const Strides*, N>& strides) {
  LoopNest<N> nest;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !nest.sizes.empty();
    for (std::size_t k = 0; k < N && merge; ++k) merge = nest.strides[k].back() == (*strides[k])[d] * shape[d];
    if (merge) {
      nest.sizes.back() *= shape[d];
      for (std::size_t k = 0; k < N; ++k) nest.strides[k].back() = (*strides[k])[d];
    } else {
      nest.sizes.push_back(shape[d]);
      for (std::size_t k = 0; k < N; ++k) nest.strides[k].push_back((*strides[k])[d]);
    }
  }
  if (nest.sizes.empty()) {
    nest.sizes.push_back(1);
    for (auto& s : nest.strides) s.push_back(1);
  }
  return nest;
}

// Walks the positions of the outer `ndim` dims of a nest in row-major order, tracking
// each operand's element offset: the index counter of the strided loops.
template <std::size_t N>
class NestCursor {
 public:
  NestCursor(const LoopNest<N>& nest, std::size_t ndim, std::int64_t start) : nest_(nest), idx_(ndim) {
    for (std::size_t d = ndim; d-- > 0;) {
      idx_[d] = start % nest.sizes[d];
      start /= nest.sizes[d];
      for (std::size_t k = 0; k < N; ++k) off_[k] += idx_[d] * nest.strides[k][d];
    }
  }
  std::int64_t offset(std::size_t k = 0) const { return off_[k]; }
  const std::array<std::int64_t, N>& offsets() const { return off_; }

  void next() {
    for (std::size_t d = idx_.size(); d-- > 0;) {
      for (std::size_t k = 0; k < N; ++k) off_[k] += nest_.strides[k][d];
      if (++idx_[d] < nest_.sizes[d]) return;
      for (std::size_t k = 0; k < N; ++k) off_[k] -= nest_.strides[k][d] * nest_.sizes[d];
      idx_[d] = 0;
    }
  }

 private:
  const LoopNest<N>& nest_;
  std::vector<std::int64_t> idx_;
  std::array<std::int64_t, N> off_{};
};

namespace loop_detail {

template <std::size_t N>
using Steps = std::array<std::int64_t, N>;

// Input I's element i, or the preloaded scalar when I is the broadcast input K.
template <std::size_t I, std::size_t K, class T, class S>
inline T load(const T* p, std::int64_t i, const S& scalar) {
  if constexpr (I == K) return scalar;
  else return p[i];
}

// The "input K is a scalar, everything else contiguous" loop, if the steps say so.
template <std::size_t K, class Out, class... In, class F, std::size_t... I>
inline bool try_scalar_input(std::int64_t n, Out* out, const std::tuple<const In*...>& in,
                             const Steps<sizeof...(In) + 1>& step, F& f, std::index_sequence<I...>) {
  if (step[K + 1] != 0 || !(((I == K) || step[I + 1] == 1) && ...)) return false;
  const auto scalar = *std::get<K>(in);
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(load<I, K>(std::get<I>(in), i, scalar)...);
  return true;
}

// One innermost run of n elements.
template <class Out, class... In, class F, std::size_t... I>
inline void run_inner(std::int64_t n, Out* out, const std::tuple<const In*...>& in,
                      const Steps<sizeof...(In) + 1>& step, F& f, std::index_sequence<I...>) {
  if (step[0] == 1) {
    if (((step[I + 1] == 1) && ...)) {
      map_contiguous(n, out, f, std::get<I>(in)...);
      return;
    }
    if ((try_scalar_input<I>(n, out, in, step, f, std::index_sequence<I...>{}) || ...)) return;
  }
  for (std::int64_t i = 0; i < n; ++i) out[i * step[0]] = f(std::get<I>(in)[i * step[I + 1]]...);
}

// True when an operand steps through the innermost dim with a large stride but through
// the next one with a smaller stride: a transposed read (or write), which walked row by
// row touches a new cache line for every element.
template <std::size_t N>
bool has_transposed_operand(const LoopNest<N>& nest) {
  const std::size_t nd = nest.sizes.size();
  if (nd < 2 || nest.sizes[nd - 1] < 2 * kTile || nest.sizes[nd - 2] < 2 * kTile) return false;
  for (const auto& s : nest.strides)
    if (s[nd - 1] > 1 && s[nd - 2] < s[nd - 1]) return true;
  return false;
}

template <class... In, std::size_t... I>
inline std::tuple<const In*...> advanced(const std::tuple<const In*...>& in, const Steps<sizeof...(In) + 1>& off,
                                         std::index_sequence<I...>) {
  return {std::get<I>(in) + off[I + 1]...};
}

}  // namespace loop_detail

// out[i] = f(inputs[0][i], ...) for every element of out, with Out and In... the element
// types of out and the inputs (the caller dispatched on dtypes). f is called concurrently
// from several threads. out may alias an input exactly (same data, same strides).
template <class Out, class... In, class F>
void cpu_kernel(Tensor& out, const std::array<const Tensor*, sizeof...(In)>& inputs, F f) {
  constexpr std::size_t N = sizeof...(In) + 1;  // operands, out first
  using Seq = std::index_sequence_for<In...>;
  if (out.numel() == 0) return;

  std::array<const Strides*, N> strides;
  strides[0] = &out.strides();
  for (std::size_t k = 1; k < N; ++k) strides[k] = &inputs[k - 1]->strides();
  const LoopNest<N> nest = coalesce(out.shape(), strides);

  Out* out_ptr = out.data<Out>();
  const std::tuple<const In*...> in_ptrs = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::tuple<const In*...>{inputs[I]->template data<In>()...};
  }(Seq{});

  const std::int64_t inner = nest.sizes.back();
  loop_detail::Steps<N> step;
  for (std::size_t k = 0; k < N; ++k) step[k] = nest.strides[k].back();

  if (nest.sizes.size() == 1) {
    parallel_for(0, inner, kGrain, [&](std::int64_t b, std::int64_t e) {
      loop_detail::Steps<N> off;
      for (std::size_t k = 0; k < N; ++k) off[k] = b * step[k];
      loop_detail::run_inner(e - b, out_ptr + off[0], loop_detail::advanced(in_ptrs, off, Seq{}), step, f, Seq{});
    });
    return;
  }

  // A transposed operand: the two innermost dims walked in kTile x kTile tiles, so that
  // the cache lines it touches in a tile's first row serve the tile's other rows too.
  const std::size_t nd = nest.sizes.size();
  if (loop_detail::has_transposed_operand(nest)) {
    const std::int64_t rows = nest.sizes[nd - 2];
    const std::int64_t row_blocks = (rows + kTile - 1) / kTile;
    const std::int64_t tasks = out.numel() / (rows * inner) * row_blocks;
    parallel_for(0, tasks, std::max<std::int64_t>(1, kGrain / (kTile * inner)), [&](std::int64_t b, std::int64_t e) {
      NestCursor<N> plane(nest, nd - 2, b / row_blocks);
      for (std::int64_t t = b; t < e; ++t) {
        if (t > b && t % row_blocks == 0) plane.next();
        const std::int64_t r0 = t % row_blocks * kTile, r1 = std::min(rows, r0 + kTile);
        for (std::int64_t c0 = 0; c0 < inner; c0 += kTile)
          for (std::int64_t r = r0; r < r1; ++r) {
            loop_detail::Steps<N> off;
            for (std::size_t k = 0; k < N; ++k) off[k] = plane.offset(k) + r * nest.strides[k][nd - 2] + c0 * step[k];
            loop_detail::run_inner(std::min(kTile, inner - c0), out_ptr + off[0],
                                   loop_detail::advanced(in_ptrs, off, Seq{}), step, f, Seq{});
          }
      }
    });
    return;
  }

  // Otherwise every dim but the innermost walked by a cursor, one innermost run per position.
  const std::int64_t outer = out.numel() / inner;
  parallel_for(0, outer, std::max<std::int64_t>(1, kGrain / inner), [&](std::int64_t b, std::int64_t e) {
    NestCursor<N> cursor(nest, nd - 1, b);
    for (std::int64_t r = b; r < e; ++r, cursor.next()) {
      const auto& off = cursor.offsets();
      loop_detail::run_inner(inner, out_ptr + off[0], loop_detail::advanced(in_ptrs, off, Seq{}), step, f, Seq{});
    }
  });
}

}  // namespace dtrain::detail::cpu
