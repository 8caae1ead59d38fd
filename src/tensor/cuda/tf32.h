// Whether f32 matmuls (cuBLAS) and convolutions (cuDNN) may run on TF32 tensor cores:
// several times faster on Ampere and later, but their products keep a 10-bit mantissa, so
// results drift from the CPU's fp32 by ~1e-3 relative. Off unless DTRAIN_ALLOW_TF32 is set
// to a non-zero integer; read once, when the first library handle is made.
#pragma once

#include "dtrain/core/environment.h"

namespace dtrain::detail::gpu {

inline bool allow_tf32() {
  static const bool allowed = env::get_int("DTRAIN_ALLOW_TF32").value_or(0) != 0;
  return allowed;
}

}  // namespace dtrain::detail::gpu
