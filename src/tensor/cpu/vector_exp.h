// exp(x) for f32 in plain arithmetic that GCC vectorizes inside a loop (libm's expf is a
// call per element, scalar): attention's softmax takes T^2 / 2 of them per head, which at
// T = 1024 cost more than its two GEMMs. Cody-Waite reduction x = n ln2 + r (|r| <= ln2 / 2),
// Cephes' degree-6 polynomial for exp(r), 2^n assembled in the exponent bits: within 2 ulps
// of the correctly rounded value over the finite range. Only adds, multiplies, conversions
// and bit moves, so every instruction-set clone computes the same bits (no FMA contraction
// under -ffp-contract=off). Subnormal results come out as such (sigmoid's far tail keeps its
// value, as libm's); below -103.98, 0; above 88.73, infinity.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

namespace dtrain::detail::cpu {

// Always inlined: a call per element would keep the caller's loop from vectorizing.
[[gnu::always_inline]] inline float vector_exp(float in) {
  const float x = std::min(std::max(in, -104.0f), 88.8f);
  // Round x / ln2 to the nearest integer: adding 1.5 * 2^23 pushes the fraction out.
  float n = x * 1.44269504088896341f + 12582912.0f;
  n = n - 12582912.0f;
  float r = x - n * 0.693359375f;  // ln2 split in two, the first part exact in few bits
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r;
  p = p + 1.0f;
  // 2^n as 2^half * 2^(n - half): both factors normal for n in [-150, 128], so results in the
  // subnormal range come out as such (one product rounds there) and 2^128 overflows to infinity.
  const auto whole = static_cast<std::int32_t>(n), half = whole / 2;
  const float y = p * std::bit_cast<float>(static_cast<std::uint32_t>(half + 127) << 23) *
                  std::bit_cast<float>(static_cast<std::uint32_t>(whole - half + 127) << 23);
  // Below -103.98 exp rounds to 0; above 88.73 to infinity (NaN passes through y).
  return in < -103.98f ? 0.0f : (in > 88.73f ? std::numeric_limits<float>::infinity() : y);
}

}  // namespace dtrain::detail::cpu
