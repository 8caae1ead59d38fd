// The Eigen GEMM peer of bench_ops. It lives in its own translation unit, compiled with
// -march=native whatever the build's flags: Eigen picks its kernels at compile time, so
// that is its best setting, and every peer gets its best settings.
#pragma once

#include <cstdint>

namespace dtrain::bench {

// C (m, n, row-major) = op(A) op(B), with A stored (k, m) when transpose_a and B stored
// (n, k) when transpose_b, both row-major; on the calling thread only.
void eigen_gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                const float* b, float* c);

// The instruction set the peer was compiled for, e.g. "AVX-512".
const char* eigen_gemm_isa();

}  // namespace dtrain::bench
