#include "common/peak_flops.h"

#include "dtrain/core/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DTRAIN_PEAK_X86 1
#endif

namespace dtrain::examples {

namespace {

constexpr std::int64_t kRounds = 1 << 16;  // FMAs per accumulator per call

// 10 independent accumulators hide the FMA latency (4 cycles, 2 ports: 8 in flight).
#ifdef DTRAIN_PEAK_X86
[[gnu::target("avx512f")]] double fma_avx512(float seed) {
  __m512 acc[10];
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 10; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  for (std::int64_t r = 0; r < kRounds; ++r)
    for (int i = 0; i < 10; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < 10; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}
[[gnu::target("avx2,fma")]] double fma_avx2(float seed) {
  __m256 acc[10];
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_ps(seed + static_cast<float>(i));
  for (std::int64_t r = 0; r < kRounds; ++r)
    for (int i = 0; i < 10; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 s = acc[0];
  for (int i = 1; i < 10; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  return out[0] + out[7];
}
#endif
double fma_scalar(float seed) {
  float acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = seed + static_cast<float>(i);
  for (std::int64_t r = 0; r < kRounds; ++r)
    for (int i = 0; i < 10; ++i) acc[i] = acc[i] * 0.999999f + 1e-7f;
  float s = 0;
  for (float x : acc) s += x;
  return s;
}

struct Kernel {
  double (*run)(float);
  int lanes;
  const char* isa;
};

Kernel best_kernel() {
#ifdef DTRAIN_PEAK_X86
  if (__builtin_cpu_supports("avx512f")) return {fma_avx512, 16, "avx512"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {fma_avx2, 8, "avx2+fma"};
#endif
  return {fma_scalar, 1, "scalar"};
}

}  // namespace

const char* peak_flops_isa() { return best_kernel().isa; }

double measure_peak_flops(double seconds) {
  const Kernel k = best_kernel();
  const int threads = num_threads();
  const double flops_per_call = 2.0 * k.lanes * 10 * static_cast<double>(kRounds);
  std::atomic<double> sink{0};
  k.run(1.0f);  // warm-up: clocks and caches
  // Each round runs one call on every thread at once; the rate is the best round's.
  double best = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    parallel_for(0, threads, 1, [&](std::int64_t b, std::int64_t e) {
      double s = 0;
      for (std::int64_t i = b; i < e; ++i) s += k.run(static_cast<float>(i));
      sink.store(s, std::memory_order_relaxed);
    });
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt > 0) best = std::max(best, flops_per_call * threads / dt);
  }
  return best;
}

}  // namespace dtrain::examples
