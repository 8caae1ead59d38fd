// The widest x86 vector instruction set the including translation unit is compiled for.
#pragma once

namespace dtrain::bench {

// Static (internal linkage), so that translation units compiled with different -march
// each keep their own answer.
static inline const char* compiled_isa() {
#if defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__)
  return "AVX2+FMA";
#elif defined(__AVX__)
  return "AVX";
#elif defined(__SSE2__)
  return "SSE2";
#else
  return "generic";
#endif
}

// The clone of dtrain's hot element-wise, batch-norm and optimizer loops that this CPU runs:
// src/tensor/cpu/isa_clones.h's condition and order (a private header of the library, so
// repeated here); the baseline clone is whatever the build targets.
inline const char* cloned_loops_isa() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && defined(__GLIBC__)
  if (__builtin_cpu_supports("avx512f")) return "AVX-512";
  if (__builtin_cpu_supports("avx2")) return "AVX2";
  return compiled_isa();
#else
  return compiled_isa();
#endif
}

}  // namespace dtrain::bench
