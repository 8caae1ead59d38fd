#include "ops/eigen_gemm.h"

#include "ops/isa.h"

// GCC 12 reports its own AVX-512 intrinsics' _mm512_undefined_ps() operands, inlined into
// Eigen's kernels, as maybe uninitialized: a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The bench, not Eigen, owns threading: this peer runs on one thread.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

namespace dtrain::bench {
namespace {

template <int OrderA, int OrderB>
void product(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n, std::int64_t k) {
  using Eigen::Dynamic;
  Eigen::Map<const Eigen::Matrix<float, Dynamic, Dynamic, OrderA>> A(a, m, k);
  Eigen::Map<const Eigen::Matrix<float, Dynamic, Dynamic, OrderB>> B(b, k, n);
  Eigen::Map<Eigen::Matrix<float, Dynamic, Dynamic, Eigen::RowMajor>> C(c, m, n);
  C.noalias() = A * B;
}

}  // namespace

// A row-major (k, m) buffer read as (m, k) is column-major: the transposes cost nothing.
void eigen_gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                const float* b, float* c) {
  constexpr int R = Eigen::RowMajor, C = Eigen::ColMajor;
  if (transpose_a && transpose_b) product<C, C>(a, b, c, m, n, k);
  else if (transpose_a) product<C, R>(a, b, c, m, n, k);
  else if (transpose_b) product<R, C>(a, b, c, m, n, k);
  else product<R, R>(a, b, c, m, n, k);
}

const char* eigen_gemm_isa() { return compiled_isa(); }

}  // namespace dtrain::bench
