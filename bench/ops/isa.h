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

}  // namespace dtrain::bench
