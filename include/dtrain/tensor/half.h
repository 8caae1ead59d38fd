// The 16-bit floating types: Half (IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa
// bits) and BFloat16 (the top half of a float: 1 sign, 8 exponent, 7 mantissa bits).
// They are storage types: arithmetic converts to float, computes, and rounds back, which is
// what GPU kernels do too (they accumulate in float). Conversions round to nearest, ties to
// even, keep infinities and NaN, and are written once for host and device, so a CPU test of
// them checks what the GPU computes.
#pragma once

#include "dtrain/core/host_device.h"

#include <bit>
#include <cstdint>

namespace dtrain {

namespace half_detail {

// (Device code has its own intrinsics: std::bit_cast is a host function to nvcc.)
DTRAIN_HD inline std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<std::uint32_t>(f);
#endif
}
DTRAIN_HD inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

DTRAIN_HD inline std::uint16_t float_to_bfloat16(float f) {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  // Adding 0x7fff, plus 1 when the kept part is odd, rounds to nearest with ties to even;
  // a carry into the exponent is the correct rounding up (to infinity at the top).
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

DTRAIN_HD inline float bfloat16_to_float(std::uint16_t b) { return bits_float(static_cast<std::uint32_t>(b) << 16); }

DTRAIN_HD inline std::uint16_t float_to_half(float f) {
  const std::uint32_t u = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN: quiet
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds past 65504: infinity
  if (a < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal or zero, round(|f| / 2^-24) units
    // of 2^-24. |f| = significand * 2^(exponent - 150) with the implicit bit made explicit,
    // so the units are the significand shifted right by 126 - exponent, rounded.
    const std::uint32_t exponent = a >> 23;
    if (exponent < 102) return sign;  // below half of 2^-24: rounds to zero
    const std::uint32_t significand = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exponent;  // 14 (exponent 112) to 24 (exponent 102)
    const std::uint32_t kept = significand >> shift;
    const std::uint32_t rest = significand & ((1u << shift) - 1u);
    const std::uint32_t half_unit = 1u << (shift - 1u);
    const std::uint32_t up = (rest > half_unit || (rest == half_unit && (kept & 1u))) ? 1u : 0u;
    return static_cast<std::uint16_t>(sign | (kept + up));  // a carry makes the smallest normal
  }
  // Normal: rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  const std::uint32_t rebased = a - 0x38000000u;  // (127 - 15) << 23
  const std::uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

DTRAIN_HD inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_float(sign);  // signed zero
  // Subnormal: mantissa * 2^-24, normalized for the float format.
  std::uint32_t e = 113;  // the exponent field of 2^-14 in float, minus the shifts below
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return bits_float(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
}

}  // namespace half_detail

struct Half {
  std::uint16_t bits;  // uninitialized by default, like a float: a trivial type for device arrays

  Half() = default;
  DTRAIN_HD inline Half(float f) : bits(half_detail::float_to_half(f)) {}  // NOLINT: like a float
  DTRAIN_HD inline Half(double d) : Half(static_cast<float>(d)) {}         // NOLINT
  DTRAIN_HD inline operator float() const { return half_detail::half_to_float(bits); }  // NOLINT
  DTRAIN_HD static Half from_bits(std::uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  std::uint16_t bits;  // uninitialized by default, like a float: a trivial type for device arrays

  BFloat16() = default;
  DTRAIN_HD inline BFloat16(float f) : bits(half_detail::float_to_bfloat16(f)) {}  // NOLINT
  DTRAIN_HD inline BFloat16(double d) : BFloat16(static_cast<float>(d)) {}          // NOLINT
  DTRAIN_HD inline operator float() const { return half_detail::bfloat16_to_float(bits); }  // NOLINT
  DTRAIN_HD static BFloat16 from_bits(std::uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

}  // namespace dtrain
