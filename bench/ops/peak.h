// The machine's single-thread fp32 peak, measured: independent chains of vector FMAs
// that stay in registers. Each ISA's loop is compiled with its own target attribute and
// the widest one the CPU runs is used, so the peak is the hardware's whatever -march the
// bench was built with (oneDNN and OpenBLAS pick their kernels at run time).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dtrain::bench {

struct Peak {
  double gflops;
  std::string isa;  // the instructions the peak loop ran
};

namespace peak_detail {

// 12 chains: more than FMA latency (4 cycles) x FMA units (2) on current x86 cores, and
// with the two constants still within AVX2's 16 vector registers.
constexpr int kChains = 12;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) inline float fma_loop_avx512(std::int64_t iters) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);  // converges to 1: no overflow or denormals
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  for (int c = 1; c < kChains; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  return lanes[0];
}

__attribute__((target("avx2,fma"))) inline float fma_loop_avx2(std::int64_t iters) {
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  for (int c = 1; c < kChains; ++c) acc[0] = _mm256_add_ps(acc[0], acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  return lanes[0];
}
#endif

// Any CPU: a multiply and an add per lane (2 flops, as an FMA), at the build's width.
inline float mul_add_loop_generic(std::int64_t iters) {
  using V = float __attribute__((vector_size(16)));
  const V a = {0.999f, 0.999f, 0.999f, 0.999f}, b = {1e-3f, 1e-3f, 1e-3f, 1e-3f};
  V acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = V{} + static_cast<float>(c);
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
  }
  for (int c = 1; c < kChains; ++c) acc[0] += acc[c];
  return acc[0][0];
}

}  // namespace peak_detail

// The best of ~2 ms runs over 0.25 s of the widest loop this CPU supports: on a shared
// machine a longer run is seldom left alone for its whole length, and a short one often is.
inline Peak measure_peak() {
  using namespace peak_detail;
  using Clock = std::chrono::steady_clock;
  float (*loop)(std::int64_t) = mul_add_loop_generic;
  int lanes = 4;
  std::string isa = "128-bit vector mul+add";
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    loop = fma_loop_avx512, lanes = 16, isa = "AVX-512 FMA";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    loop = fma_loop_avx2, lanes = 8, isa = "AVX2 FMA";
  }
#endif
  volatile float sink = 0;  // keeps the loops' results alive
  auto seconds = [&](std::int64_t iters) {
    const auto start = Clock::now();
    sink = sink + loop(iters);
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  std::int64_t iters = 1024;
  while (seconds(iters) < 2e-3) iters *= 2;
  double best = 0;
  for (const auto end = Clock::now() + std::chrono::milliseconds(250); Clock::now() < end;) {
    best = std::max(best, 2.0 * lanes * kChains * static_cast<double>(iters) / seconds(iters) / 1e9);
  }
  return {best, isa};
}

}  // namespace dtrain::bench
