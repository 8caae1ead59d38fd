// CUDA matmul through cuBLAS: one strided-batched GEMM per call, f32 (Sgemm), f64
// (Dgemm), or f16/bf16 operands with an f32 result (GemmEx). cuBLAS is column-major and our tensors are row-major, so
// it computes C^T = B^T A^T: a row-major (r, c) slice read as column-major is its own transpose, so a slice with unit
// column stride is passed as is ('N') with its row stride as leading dimension, and a transposed view (unit row stride)
// as 'T' with its column stride. As on the CPU (cpu/matmul.cpp), operands are read in place with any batch stride, 0
// for a broadcast included, and copied only when neither of their last two dims is unit-stride.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/library_check.h"
#include "tensor/cuda/tf32.h"
#include "tensor/kernel_layout.h"

#include <algorithm>
#include <climits>
#include <type_traits>

namespace dtrain::detail {
namespace {

// The workspace cuBLAS may use for its kernels: NVIDIA recommends 32 MiB on Hopper (4
// MiB before). Ours comes from the device's block cache, so cuBLAS never allocates memory
// behind the cache's back (its default pool would hold memory the cache cannot reuse).
constexpr std::size_t kBlasWorkspaceBytes = std::size_t{32} << 20;

// One operand as cuBLAS sees it (in the column-major product C^T = B^T A^T).
struct Operand {
  cublasOperation_t op;
  std::int64_t ld;  // leading dimension
  long long batch_stride;
};

Operand describe(const Tensor& t) {
  // With a single stored row (column) the stride between rows (columns) is arbitrary;
  // BLAS wants the leading dimension >= the row's (column's) length.
  if (row_major(t)) {
    return {CUBLAS_OP_N, std::max<std::int64_t>(t.size(1) == 1 ? t.size(2) : t.stride(1), 1), t.stride(0)};
  }
  return {CUBLAS_OP_T, std::max<std::int64_t>(t.size(2) == 1 ? t.size(1) : t.stride(2), 1), t.stride(0)};
}

int as_int(std::int64_t v, const char* what) {
  DTRAIN_CHECK(v <= INT_MAX, "matmul: {} {} exceeds cuBLAS's 32-bit limit", what, v);
  return static_cast<int>(v);
}

}  // namespace

cublasContext* CudaBackend::blas() {
  std::call_once(blas_once_, [&] {
    cublasHandle_t handle = nullptr;
    DTRAIN_CUBLAS_CHECK(cublasCreate(&handle));
    void* workspace = nullptr;
    try {
      // Binding a stream resets the workspace to cuBLAS's own pool: set ours after.
      DTRAIN_CUBLAS_CHECK(cublasSetStream(handle, stream_));
      workspace = allocate(kBlasWorkspaceBytes);
      DTRAIN_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace, kBlasWorkspaceBytes));
      // The default math mode keeps f32 products exact fp32; TF32 only when allowed.
      if (gpu::allow_tf32()) DTRAIN_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH));
    } catch (...) {
      cublasDestroy(handle);
      if (workspace != nullptr) deallocate(workspace, kBlasWorkspaceBytes);
      throw;
    }
    blas_ = handle;
  });
  return blas_;
}

void CudaBackend::matmul(const Tensor& a, const Tensor& b, Tensor& out) { gemm(a, b, out, /*accumulate=*/false); }

void CudaBackend::matmul_add(const Tensor& a, const Tensor& b, Tensor& out) { gemm(a, b, out, /*accumulate=*/true); }

void CudaBackend::gemm(const Tensor& a_in, const Tensor& b_in, Tensor& out, bool accumulate) {
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a_in.size(2);
  if (out.numel() == 0) return;
  if (k == 0) {  // an empty sum; BLAS may leave out untouched
    if (!accumulate) fill(out, 0);
    return;
  }
  cuda::DeviceGuard guard(device_);
  const Tensor a = gemm_operand(a_in), b = gemm_operand(b_in);
  const Operand oa = describe(a), ob = describe(b);
  // Column-major: C^T (n, m) = op(B^T) (n, k) * op(A^T) (k, m), ldc = n.
  const int cm = as_int(n, "dimension"), cn = as_int(m, "dimension"), ck = as_int(k, "dimension");
  const int lda = as_int(ob.ld, "leading dimension"), ldb = as_int(oa.ld, "leading dimension");
  const int count = as_int(batch, "batch");
  const long long out_stride = m * n;
  cublasHandle_t handle = blas();
  if (is_half(a.dtype())) {
    // Mixed precision: 16-bit operands on the tensor cores, summed and written in f32
    // (CUBLAS_COMPUTE_32F), whatever the TF32 setting.
    const cudaDataType in_type = a.dtype() == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const float one = 1, beta = accumulate ? 1 : 0;
    DTRAIN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, ob.op, oa.op, cm, cn, ck, &one, b.raw_data(), in_type, lda,
                                                   ob.batch_stride, a.raw_data(), in_type, ldb, oa.batch_stride, &beta,
                                                   out.raw_data(), CUDA_R_32F, cm, out_stride, count,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  dispatch_floating(out.dtype(), "matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T one = 1, beta = accumulate ? 1 : 0;
    if constexpr (std::is_same_v<T, float>) {
      DTRAIN_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, ob.op, oa.op, cm, cn, ck, &one, b.data<T>(), lda,
                                                    ob.batch_stride, a.data<T>(), ldb, oa.batch_stride, &beta,
                                                    out.data<T>(), cm, out_stride, count));
    } else {
      static_assert(std::is_same_v<T, double>, "matmul: no cuBLAS call for this dtype");
      DTRAIN_CUBLAS_CHECK(cublasDgemmStridedBatched(handle, ob.op, oa.op, cm, cn, ck, &one, b.data<T>(), lda,
                                                    ob.batch_stride, a.data<T>(), ldb, oa.batch_stride, &beta,
                                                    out.data<T>(), cm, out_stride, count));
    }
  });
}

}  // namespace dtrain::detail
