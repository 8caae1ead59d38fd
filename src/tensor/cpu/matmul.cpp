// CPU matmul: f32 through oneDNN's sgemm (AVX-512 kernels chosen at run time), bf16
// through oneDNN's bf16 matmul (f32 sums and result) where the CPU multiplies bf16
// natively, f64 through Eigen's GEMM. Each (m,k) / (k,n) slice is read in place when its last two dims
// are row-major or column-major (a transposed view), with any outer stride, so neither
// transposes nor broadcast batches cost a copy. Each GEMM call is single-threaded; the
// threads of our pool split the batch, or the output rows of one large product.
#include "dtrain/core/parallel.h"
#include "dtrain/tensor/cpu_kernels.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/onednn.h"
#include "tensor/kernel_layout.h"

// Our pool owns the threads: keep Eigen sequential even if OpenMP is ever enabled.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include <algorithm>
#include <type_traits>

namespace dtrain::detail {
namespace {

// Multiply-adds per parallel chunk: ~10-20 us of GEMM, well above a pool wake-up.
constexpr std::int64_t kMinChunkWork = 1 << 18;

// A 16-bit operand as f32, in the same layout (row- or column-major slices), so that the
// f32 GEMM reads it as it would the f32 tensor it was rounded from.
Tensor widened(const Tensor& t) {
  if (t.size(0) > 1 && t.stride(0) == 0) return widened(t.narrow(0, 0, 1)).expand(t.shape());  // one slice
  if (!row_major(t) && col_major(t)) return t.transpose(1, 2).to(DType::f32).transpose(1, 2);
  return t.to(DType::f32);
}

// One operand as Eigen sees it: slice b starts at data + b * batch_stride.
template <class T>
struct Operand {
  const T* data;
  std::int64_t batch_stride;
  std::int64_t outer_stride;  // between rows (row-major) or columns (column-major)
};

template <class T>
Operand<T> describe(const Tensor& t, bool as_row_major) {
  // With a single stored row the stride between rows is arbitrary; BLAS wants it >= the
  // row's length.
  const std::int64_t outer = as_row_major ? (t.size(1) == 1 ? t.size(2) : t.stride(1))
                                          : (t.size(2) == 1 ? t.size(1) : t.stride(2));
  return {t.data<T>(), t.stride(0), std::max<std::int64_t>(outer, 1)};
}

template <class T, int Order>
using ConstMap =
    Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using OutMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// The type a product of T operands is written in: f32 for bf16, else T.
template <class T>
using ProductOf = std::conditional_t<std::is_same_v<T, BFloat16>, float, T>;

// out[batch] rows [r0, r1) = a[batch] rows [r0, r1) @ b[batch], for every batch in turn;
// `accumulate`: += instead (f32 and f64 only).
template <class T, int OrderA, int OrderB>
void batched_gemm(const Operand<T>& a, const Operand<T>& b, ProductOf<T>* out, std::int64_t batch, std::int64_t m,
                  std::int64_t k, std::int64_t n, bool accumulate) {
  auto product = [&](std::int64_t i, std::int64_t r0, std::int64_t r1) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
      // Rows r0.. of op(A) start r0 rows into a row-major A, r0 columns into a stored A^T.
      const T* a_rows = a.data + i * a.batch_stride + r0 * (OrderA == Eigen::RowMajor ? a.outer_stride : 1);
      const bool trans_a = OrderA != Eigen::RowMajor, trans_b = OrderB != Eigen::RowMajor;
      const T* b_data = b.data + i * b.batch_stride;
      ProductOf<T>* c_rows = out + i * m * n + r0 * n;
      if constexpr (std::is_same_v<T, float>)
        onednn::sgemm(trans_a, trans_b, r1 - r0, n, k, a_rows, a.outer_stride, b_data, b.outer_stride, c_rows, n,
                      accumulate ? 1.0f : 0.0f);
      else
        onednn::gemm_bf16(trans_a, trans_b, r1 - r0, n, k, a_rows, a.outer_stride, b_data, b.outer_stride, c_rows, n);
    } else {
      static_assert(std::is_same_v<T, double>, "f16 operands are widened before they get here");
      ConstMap<T, OrderA> A(a.data + i * a.batch_stride, m, k, Eigen::OuterStride<>(a.outer_stride));
      ConstMap<T, OrderB> B(b.data + i * b.batch_stride, k, n, Eigen::OuterStride<>(b.outer_stride));
      OutMap<T> C(out + i * m * n, m, n);
      if (accumulate) C.middleRows(r0, r1 - r0).noalias() += A.middleRows(r0, r1 - r0) * B;
      else C.middleRows(r0, r1 - r0).noalias() = A.middleRows(r0, r1 - r0) * B;
    }
  };
  const std::int64_t work = m * n * std::max<std::int64_t>(k, 1);
  if (batch >= num_threads()) {
    parallel_for(0, batch, std::max<std::int64_t>(1, kMinChunkWork / work), [&](std::int64_t b0, std::int64_t b1) {
      for (std::int64_t i = b0; i < b1; ++i) product(i, 0, m);
    });
    return;
  }
  const std::int64_t row_grain = std::max<std::int64_t>(1, kMinChunkWork / std::max<std::int64_t>(work / m, 1));
  for (std::int64_t i = 0; i < batch; ++i) {
    parallel_for(0, m, row_grain, [&](std::int64_t r0, std::int64_t r1) { product(i, r0, r1); });
  }
}

}  // namespace

namespace {

// out (=, or += with `accumulate`) a @ b, the operands as CpuBackend::matmul takes them.
void gemm_into(const Tensor& a_in, const Tensor& b_in, Tensor& out, bool accumulate) {
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a_in.size(2);
  if (out.numel() == 0) return;
  if (k == 0) {  // an empty sum; BLAS may leave out untouched
    if (!accumulate) cpu_backend().fill(out, 0);
    return;
  }
  const bool native = a_in.dtype() == DType::bf16 && cpu_native_bf16();
  Tensor a = gemm_operand(a_in), b = gemm_operand(b_in);
  const bool a_rows = row_major(a), b_rows = row_major(b);
  const auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    Operand<T> oa = describe<T>(a, a_rows), ob = describe<T>(b, b_rows);
    ProductOf<T>* c = out.data<ProductOf<T>>();
    if (a_rows && b_rows)
      batched_gemm<T, Eigen::RowMajor, Eigen::RowMajor>(oa, ob, c, batch, m, k, n, accumulate);
    else if (a_rows)
      batched_gemm<T, Eigen::RowMajor, Eigen::ColMajor>(oa, ob, c, batch, m, k, n, accumulate);
    else if (b_rows)
      batched_gemm<T, Eigen::ColMajor, Eigen::RowMajor>(oa, ob, c, batch, m, k, n, accumulate);
    else
      batched_gemm<T, Eigen::ColMajor, Eigen::ColMajor>(oa, ob, c, batch, m, k, n, accumulate);
  };
  if (native) return run(type_tag<BFloat16>{});
  dispatch_floating(out.dtype(), "matmul", run);
}

}  // namespace

void CpuBackend::matmul(const Tensor& a_in, const Tensor& b_in, Tensor& out) {
  // 16-bit operands: the f32 result of exact products summed in f32, as a tensor-core GEMM
  // gives. bf16 on a CPU with bf16 dot products runs oneDNN's bf16 matmul; otherwise the
  // operands are widened to f32 exactly and take the f32 GEMM (cpu_kernels.h).
  const bool native = a_in.dtype() == DType::bf16 && cpu_native_bf16();
  if (is_half(a_in.dtype()) && !native) return matmul(widened(a_in), widened(b_in), out);
  gemm_into(a_in, b_in, out, /*accumulate=*/false);
}

void CpuBackend::matmul_add(const Tensor& a, const Tensor& b, Tensor& out) {
  // oneDNN's bf16 GEMM writes with beta 0: 16-bit operands take the default's temporary.
  if (a.dtype() != DType::f32 && a.dtype() != DType::f64) return Backend::matmul_add(a, b, out);
  gemm_into(a, b, out, /*accumulate=*/true);
}

}  // namespace dtrain::detail
