// exp(x) for f32 in plain arithmetic that GCC vectorizes inside a loop (libm's expf is a
// call per element, scalar): attention's softmax takes T^2 / 2 of them per head, which at
// T = 1024 cost more than its two GEMMs. Cody-Waite reduction x = n ln2 + r (|r| <= ln2 / 2),
// Cephes' degree-6 polynomial for exp(r), 2^n assembled in the exponent bits: within 2 ulps
// of the correctly rounded value over the finite range. Only adds, multiplies, conversions
// and bit moves, so every instruction-set clone computes the same bits (no FMA contraction
// under -ffp-contract=off). Below -87.3, where exp(x) is subnormal, it returns 0 (an absolute
// error under 1.2e-38: sigmoid's tail, far-off attention scores); above 88.7, infinity.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

namespace dtrain::detail::cpu {

// Always inlined: a call per element would keep the caller's loop from vectorizing.
[[gnu::always_inline]] inline float vector_exp(float in) {
  const float x = std::min(std::max(in, -87.3f), 88.7f);
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
  const auto exponent = static_cast<std::int32_t>(n) + 127;
  const float y = p * std::bit_cast<float>(static_cast<std::uint32_t>(exponent) << 23);
  // Past the reduction's range: 0 and infinity, chosen without a branch (NaN passes through y).
  return in < -87.3f ? 0.0f : (in > 88.7f ? std::numeric_limits<float>::infinity() : y);
}

}  // namespace dtrain::detail::cpu
