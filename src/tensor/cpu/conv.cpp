// CPU 2-D convolution: f32 through oneDNN (onednn_conv.cpp); f64, which the gradient
// checks use, as im2col + GEMM here, and so are f32 weight gradients where oneDNN's GEMM
// outruns its direct kernels (cpu_kernels.h), with oneDNN's sgemm for the products. For
// one image and one group, the columns matrix (Cg*KH*KW, OH*OW) holds every input patch as
// a column, so the convolution is the product weight (Og, Cg*KH*KW) @ columns. Forward and
// backward-input split the images across threads, each with one column buffer for the
// whole call; the weight gradient splits the columns matrix's rows (conv_backward_weight).
// 1x1 stride-1 unpadded kernels use the input as the columns.
#include "dtrain/core/parallel.h"
#include "dtrain/tensor/cpu_kernels.h"
#include "tensor/cpu/blocked_layout.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/onednn.h"
#include "tensor/cpu/onednn_conv.h"

// Our pool owns the threads: keep Eigen sequential even if OpenMP is ever enabled.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace dtrain::detail {
namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MatMap = Eigen::Map<RowMat<T>>;
template <class T>
using ConstMatMap = Eigen::Map<const RowMat<T>>;

struct ConvGeometry {
  std::int64_t n, c, h, w;      // input
  std::int64_t o, kh, kw;       // weight
  std::int64_t oh, ow;          // output
  std::int64_t groups, cg, og;  // groups; input and output channels per group
  std::int64_t k;               // rows of the columns matrix: cg * kh * kw
  std::int64_t p;               // columns: oh * ow
  Conv2dParams params;

  // The input already is its own columns matrix (cg, h * w).
  bool pointwise() const {
    return kh == 1 && kw == 1 && params.stride_h == 1 && params.stride_w == 1 && params.pad_h == 0 && params.pad_w == 0;
  }
  std::int64_t column_buffer_size() const { return pointwise() ? 0 : k * p; }
};

ConvGeometry geometry(const Shape& x, const Shape& w, const Shape& out, const Conv2dParams& params) {
  ConvGeometry g{};
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.o = w[0], g.kh = w[2], g.kw = w[3];
  g.oh = out[2], g.ow = out[3];
  g.groups = params.groups, g.cg = g.c / g.groups, g.og = g.o / g.groups;
  g.k = g.cg * g.kh * g.kw, g.p = g.oh * g.ow;
  g.params = params;
  return g;
}

// Output positions [first, last) along one dim whose input position pos * stride + shift
// falls inside [0, size).
struct Span {
  std::int64_t first, last;
};
Span valid_span(std::int64_t shift, std::int64_t stride, std::int64_t size, std::int64_t out_size) {
  std::int64_t first = shift >= 0 ? 0 : (-shift + stride - 1) / stride;
  std::int64_t last = size - shift <= 0 ? 0 : (size - shift + stride - 1) / stride;
  first = std::min(first, out_size);
  return {first, std::clamp(last, first, out_size)};
}

// Rows [first, last) of a group's columns matrix.
struct Rows {
  std::int64_t first, last;
};

// Visits every (columns row, output row oh) pair of one group for the rows `rows`, with
// the matching input row (nullptr when it lies in the padding) and the valid output
// columns. Row r of the columns matrix is channel c, kernel offset (i, j):
// r = (c * kh + i) * kw + j; the visited rows lie `ld` apart from rows.first on (g.p
// unless several images' columns stand side by side).
template <class Visit>
void for_each_patch_row(const ConvGeometry& g, std::int64_t ld, Rows rows, Visit visit) {
  const Conv2dParams& q = g.params;
  for (std::int64_t row = rows.first; row < rows.last; ++row) {
    const std::int64_t c = row / (g.kh * g.kw), i = row / g.kw % g.kh, j = row % g.kw;
    const std::int64_t shift_w = j * q.dilation_w - q.pad_w;  // input col = ow * stride_w + shift_w
    const Span cols = valid_span(shift_w, q.stride_w, g.w, g.ow);
    for (std::int64_t y = 0; y < g.oh; ++y) {
      const std::int64_t ih = y * q.stride_h - q.pad_h + i * q.dilation_h;
      const bool inside = ih >= 0 && ih < g.h;
      visit((row - rows.first) * ld + y * g.ow, inside ? (c * g.h + ih) * g.w : -1, shift_w, cols);
    }
  }
}

// cols = rows `rows` of im2col(x) for one image group x (cg, h, w), `ld` apart; padding
// reads as zero.
template <class T>
void im2col(const T* x, const ConvGeometry& g, T* cols, std::int64_t ld, Rows rows) {
  const std::int64_t sw = g.params.stride_w;
  for_each_patch_row(g, ld, rows, [&](std::int64_t dst, std::int64_t src, std::int64_t shift, Span span) {
    T* out = cols + dst;
    if (src < 0) {
      std::fill(out, out + g.ow, T(0));
      return;
    }
    std::fill(out, out + span.first, T(0));
    if (sw == 1 && span.first < span.last) {
      std::copy(x + src + shift + span.first, x + src + shift + span.last, out + span.first);
    } else {
      for (std::int64_t ow = span.first; ow < span.last; ++ow) out[ow] = x[src + shift + ow * sw];
    }
    std::fill(out + span.last, out + g.ow, T(0));
  });
}

// x += col2im(cols): the adjoint of im2col (overlapping patches accumulate).
template <class T>
void col2im_add(const T* cols, const ConvGeometry& g, T* x) {
  const std::int64_t sw = g.params.stride_w;
  for_each_patch_row(g, g.p, Rows{0, g.k}, [&](std::int64_t src, std::int64_t dst, std::int64_t shift, Span span) {
    if (dst < 0) return;
    for (std::int64_t ow = span.first; ow < span.last; ++ow) x[dst + shift + ow * sw] += cols[src + ow];
  });
}

// The columns of image n, group gi: the input itself (pointwise) or im2col into buf.
template <class T>
const T* columns(const T* x, const ConvGeometry& g, std::int64_t n, std::int64_t gi, T* buf) {
  const T* xg = x + (n * g.c + gi * g.cg) * g.h * g.w;
  if (g.pointwise()) return xg;
  im2col(xg, g, buf, g.p, Rows{0, g.k});
  return buf;
}

template <class T>
void conv_forward(const Tensor& x_t, const Tensor& w_t, const Tensor& bias_t, const ConvGeometry& g, Tensor& out_t) {
  const T* x = x_t.data<T>();
  const T* w = w_t.data<T>();
  const T* bias = bias_t.defined() ? bias_t.data<T>() : nullptr;
  T* out = out_t.data<T>();
  parallel_for(0, g.n, 1, [&](std::int64_t n0, std::int64_t n1) {
    std::vector<T> buf(static_cast<std::size_t>(g.column_buffer_size()));
    for (std::int64_t n = n0; n < n1; ++n) {
      for (std::int64_t gi = 0; gi < g.groups; ++gi) {
        ConstMatMap<T> cols(columns(x, g, n, gi, buf.data()), g.k, g.p);
        ConstMatMap<T> weight(w + gi * g.og * g.k, g.og, g.k);
        MatMap<T> y(out + (n * g.o + gi * g.og) * g.p, g.og, g.p);
        y.noalias() = weight * cols;
        if (bias) y.colwise() += Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(bias + gi * g.og, g.og);
      }
    }
  });
}

template <class T>
void conv_backward_input(const Tensor& go_t, const Tensor& w_t, const ConvGeometry& g, Tensor& gx_t) {
  const T* go = go_t.data<T>();
  const T* w = w_t.data<T>();
  T* gx = gx_t.data<T>();
  parallel_for(0, g.n, 1, [&](std::int64_t n0, std::int64_t n1) {
    std::vector<T> buf(static_cast<std::size_t>(g.column_buffer_size()));
    for (std::int64_t n = n0; n < n1; ++n) {
      for (std::int64_t gi = 0; gi < g.groups; ++gi) {
        ConstMatMap<T> weight(w + gi * g.og * g.k, g.og, g.k);
        ConstMatMap<T> grad_y(go + (n * g.o + gi * g.og) * g.p, g.og, g.p);
        T* gxg = gx + (n * g.c + gi * g.cg) * g.h * g.w;
        if (g.pointwise()) {
          MatMap<T>(gxg, g.cg, g.p).noalias() += weight.transpose() * grad_y;
        } else {
          MatMap<T>(buf.data(), g.k, g.p).noalias() = weight.transpose() * grad_y;
          col2im_add(buf.data(), g, gxg);
        }
      }
    }
  });
}

// acc (og, rows) = grad_y (og, q) @ cols (rows, q)^T + beta * acc, grad_y's and cols' rows
// q apart, acc's k apart (a block of columns of the group's weight gradient): oneDNN's
// sgemm for f32, Eigen for f64.
template <class T>
void weight_product(const T* grad_y, const T* cols, std::int64_t q, std::int64_t rows, const ConvGeometry& g, T* acc,
                    T beta) {
  if constexpr (std::is_same_v<T, float>) {
    onednn::sgemm(false, true, g.og, rows, q, grad_y, q, cols, q, acc, g.k, beta);
  } else {
    Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>> block(acc, g.og, rows, Eigen::OuterStride<>(g.k));
    const auto product = ConstMatMap<T>(grad_y, g.og, q) * ConstMatMap<T>(cols, rows, q).transpose();
    if (beta == T(0)) {
      block.noalias() = product;
    } else {
      block.noalias() += product;
    }
  }
}

// Images whose columns go side by side into one product: each product then sums over at
// least ~512 positions, as a GEMM needs to run near its peak, instead of reading and
// writing the weight gradient once per image of a small feature map (a 4x4 map would sum
// over 16).
std::int64_t images_per_product(const ConvGeometry& g) {
  if (g.p == 0) return 1;
  return std::max<std::int64_t>(1, std::min<std::int64_t>(g.n, (512 + g.p - 1) / g.p));
}

// The columns-matrix rows of one part of `parts` (at most one per 16 rows): whole
// multiples of 16 rows (two AVX-512 vectors of the GEMM's output), but for the last part's
// end, so that no part is empty.
Rows part_rows(std::int64_t k, std::int64_t part, std::int64_t parts) {
  const std::int64_t units = (k + 15) / 16;
  const auto bound = [&](std::int64_t i) { return std::min(k, units * i / parts * 16); };
  return {bound(part), bound(part + 1)};
}

// A part's scratch, from dtrain's block cache: its rows of m images' columns side by side
// (rows, m * p), unless they are one image's input as it is (1x1, m = 1), and those
// images' output gradients likewise (og, m * p) when m > 1.
template <class T>
struct WeightGradScratch {
  onednn::Buffer cols, grads;
  WeightGradScratch(const ConvGeometry& g, std::int64_t rows, std::int64_t m)
      : cols(sizeof(T) *
             static_cast<std::size_t>(g.pointwise() && m == 1 ? 1 : std::max<std::int64_t>(1, rows * m * g.p))),
        grads(sizeof(T) * static_cast<std::size_t>(m == 1 ? 1 : g.og * m * g.p)) {}
  T* columns() const { return static_cast<T*>(cols.data()); }
  T* gradients() const { return static_cast<T*>(grads.data()); }
};

// grad_w (o, k) = sum over images of grad_y (og, p) @ cols (k, p)^T, per group. The k
// columns of grad_w (input channel and kernel offset) are split across the pool's threads:
// each builds only its own rows of the columns matrix, for every image, and writes only its
// own columns of grad_w, so that no partial sums are kept or added up afterwards and every
// image's columns are built once. `images_per_product` images at a time, their columns and
// output gradients side by side, form one product (each part gathers the output gradients
// itself: og * m * p copies against og * rows * m * p multiply-adds). Images are summed in
// order, so for a given thread count the result is deterministic.
template <class T>
void conv_backward_weight(const T* go, const T* x, const ConvGeometry& g, Tensor& gw_t) {
  T* gw = gw_t.data<T>();
  if (g.n == 0 || g.p == 0) {  // a sum over nothing
    std::fill_n(gw, gw_t.numel(), T(0));
    return;
  }
  const std::int64_t batch = images_per_product(g);
  const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>((g.k + 15) / 16, num_threads()));
  parallel_for(0, parts, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t part = p0; part < p1; ++part) {
      const Rows rows = part_rows(g.k, part, parts);
      const std::int64_t nrows = rows.last - rows.first;
      const WeightGradScratch<T> scratch(g, nrows, batch);
      T* cols = scratch.columns();
      for (std::int64_t n0 = 0; n0 < g.n; n0 += batch) {
        const std::int64_t m = std::min(batch, g.n - n0), q = m * g.p;
        for (std::int64_t gi = 0; gi < g.groups; ++gi) {
          const T* grad_y = go + (n0 * g.o + gi * g.og) * g.p;
          const T* columns_of = cols;
          for (std::int64_t j = 0; j < m; ++j) {
            const T* xg = x + ((n0 + j) * g.c + gi * g.cg) * g.h * g.w;
            if (g.pointwise() && m == 1) {
              columns_of = xg + rows.first * g.p;  // one image's rows of a 1x1 input are its columns
            } else if (g.pointwise()) {
              for (std::int64_t r = rows.first; r < rows.last; ++r) {
                std::copy_n(xg + r * g.p, g.p, cols + (r - rows.first) * q + j * g.p);
              }
            } else {
              im2col(xg, g, cols + j * g.p, q, rows);
            }
            if (m == 1) continue;  // grad_y is the product's operand as it is
            const T* gy = grad_y + j * g.o * g.p;
            for (std::int64_t r = 0; r < g.og; ++r) std::copy_n(gy + r * g.p, g.p, scratch.gradients() + r * q + j * g.p);
          }
          weight_product(m == 1 ? grad_y : scratch.gradients(), columns_of, q, nrows, g, gw + gi * g.og * g.k + rows.first,
                         n0 == 0 ? T(0) : T(1));
        }
      }
    }
  });
}

// Whether f32 weight gradients take im2col + GEMM (see cpu_kernels.h). Auto, without
// AVX-512 (bench/results/conv_weight_grad_ops.txt, AVX2): GEMM for kernels of 3x3 and
// smaller, 0.9-1.6x the direct kernels on ResNet layers (1.2x typical), and for a single
// input channel (LeNet's first layer: 2.8x); direct for larger kernels over more channels
// (LeNet's 5x5 32->64: 0.65x, ResNet's 7x7 stem: 0.87x) and for grouped convolutions,
// whose per-group products are too small for a GEMM to pay.
bool gemm_weight_gradients(const ConvGeometry& g) {
  switch (cpu_conv_weight_grad()) {
    case ConvWeightGrad::Direct: return false;
    case ConvWeightGrad::Gemm: return true;
    case ConvWeightGrad::Auto:
      return g.groups == 1 && !onednn::has_avx512() && (g.kh * g.kw <= 9 || g.cg == 1);
  }
  return false;
}

}  // namespace

namespace {
// cuDNN writes the result of 16-bit operands in their type, which is then widened to f32
// (cuda/cudnn_conv.cpp): the CPU rounds its exact f32 sums the same way, so that both give
// the same numbers (an f16 overflow to inf included).
void round_like_cudnn(Tensor& result, DType operands) { result.copy_(result.to(operands)); }

// bf16 operands where the CPU multiplies them natively (cpu_kernels.h): oneDNN's bf16
// kernels, which round activations and input gradients to bf16 themselves.
bool native_bf16(DType operands) { return operands == DType::bf16 && cpu_native_bf16(); }
}  // namespace

// 16-bit operands (mixed precision) run oneDNN's bf16 kernels where native_bf16, else are
// widened to f32 exactly and take the f32 kernels; the result is rounded as cuDNN's is,
// before the f32 bias is added.
void CpuBackend::conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, Tensor& out) {
  if (is_half(x.dtype())) {
    if (native_bf16(x.dtype())) {
      onednn::conv2d_forward(x.contiguous(), w.contiguous(), Tensor(), p, out);
    } else {
      conv2d(x.to(DType::f32), w.to(DType::f32), Tensor(), p, out);
      round_like_cudnn(out, x.dtype());
    }
    if (bias.defined()) binary(BinaryOp::Add, out, bias.reshape({1, bias.size(0), 1, 1}).expand(out.shape()), out);
    return;
  }
  const ConvGeometry g = geometry(x.shape(), w.shape(), out.shape(), p);
  Tensor xc = x.contiguous(), wc = w.contiguous(), bc = bias.defined() ? bias.contiguous() : Tensor();
  if (x.dtype() == DType::f32) return onednn::conv2d_forward(xc, wc, bc, p, out);
  dispatch_floating(x.dtype(), "conv2d",
                    [&](auto tag) { conv_forward<typename decltype(tag)::type>(xc, wc, bc, g, out); });
}

void CpuBackend::conv2d_backward_input(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, Tensor& grad_x) {
  if (native_bf16(grad_out.dtype())) {
    return onednn::conv2d_backward_data(grad_out.contiguous(), w.contiguous(), p, grad_x);
  }
  if (is_half(grad_out.dtype())) {
    conv2d_backward_input(grad_out.to(DType::f32), w.to(DType::f32), p, grad_x);
    return round_like_cudnn(grad_x, grad_out.dtype());
  }
  const ConvGeometry g = geometry(grad_x.shape(), w.shape(), grad_out.shape(), p);
  Tensor goc = grad_out.contiguous(), wc = w.contiguous();
  if (grad_out.dtype() == DType::f32) return onednn::conv2d_backward_data(goc, wc, p, grad_x);
  fill(grad_x, 0.0);  // the reference kernel adds each image's columns into it
  dispatch_floating(grad_out.dtype(), "conv2d_backward_input",
                    [&](auto tag) { conv_backward_input<typename decltype(tag)::type>(goc, wc, g, grad_x); });
}

void CpuBackend::conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p,
                                        Tensor& grad_w) {
  if (is_half(grad_out.dtype())) {
    // oneDNN's bf16 kernels write f32 weight gradients, rounded here as the emulation's are.
    if (native_bf16(grad_out.dtype())) {
      onednn::conv2d_backward_weights(grad_out.contiguous(), x.contiguous(), p, grad_w);
    } else {
      conv2d_backward_weight(grad_out.to(DType::f32), x.to(DType::f32), p, grad_w);
    }
    return round_like_cudnn(grad_w, grad_out.dtype());
  }
  const ConvGeometry g = geometry(x.shape(), grad_w.shape(), grad_out.shape(), p);
  Tensor goc = grad_out.contiguous(), xc = x.contiguous();
  if (grad_out.dtype() == DType::f32) {
    if (!gemm_weight_gradients(g)) return onednn::conv2d_backward_weights(goc, xc, p, grad_w);
    // Blocked operands are read through plain copies and stay blocked: the input is often a
    // fused batch norm's output, whose backward reads it as its ReLU mask.
    std::unique_ptr<onednn::Buffer> go_copy, x_copy;
    const float* go = onednn::plain_floats(goc, go_copy);
    return conv_backward_weight<float>(go, onednn::plain_floats(xc, x_copy), g, grad_w);
  }
  dispatch_floating(grad_out.dtype(), "conv2d_backward_weight", [&](auto tag) {
    using T = typename decltype(tag)::type;
    conv_backward_weight<T>(goc.data<T>(), xc.data<T>(), g, grad_w);
  });
}

}  // namespace dtrain::detail
