// The 16-bit float conversions (dtrain/tensor/half.h), which the GPU kernels share: every
// one of the 65,536 bit patterns of each type round-trips through float, and float to
// 16 bits picks the nearest value with ties to even, against a reference built by sorting
// every finite value of the type.
#include "dtrain/tensor/half.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using namespace dtrain;

namespace {

template <class H>
void check_round_trips() {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const H h = H::from_bits(static_cast<std::uint16_t>(b));
    const float f = h;
    if (std::isnan(f)) {
      CHECK(std::isnan(static_cast<float>(H(f))));
      continue;
    }
    INFO("bits 0x" << std::hex << b);
    REQUIRE(H(f).bits == h.bits);
  }
}

// The nearest finite value of H to x (ties: the one with an even bit pattern), or
// infinity when x lies beyond the largest finite value by at least half a unit there.
template <class H>
float nearest(const std::vector<std::pair<double, std::uint16_t>>& sorted, double x, double overflow_at) {
  if (std::abs(x) >= overflow_at) return x > 0 ? std::numeric_limits<float>::infinity()
                                               : -std::numeric_limits<float>::infinity();
  auto hi = std::lower_bound(sorted.begin(), sorted.end(), std::make_pair(x, std::uint16_t{0}));
  if (hi == sorted.begin()) return static_cast<float>(hi->first);
  auto lo = hi - 1;
  if (hi == sorted.end()) return static_cast<float>(lo->first);
  const double dl = x - lo->first, dh = hi->first - x;
  if (dl < dh) return static_cast<float>(lo->first);
  if (dh < dl) return static_cast<float>(hi->first);
  return static_cast<float>((lo->second & 1) == 0 ? lo->first : hi->first);
}

template <class H>
void check_rounding(double overflow_at) {
  std::vector<std::pair<double, std::uint16_t>> sorted;
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const float f = H::from_bits(static_cast<std::uint16_t>(b));
    if (std::isfinite(f) && !(f == 0 && std::signbit(f))) sorted.emplace_back(f, static_cast<std::uint16_t>(b));
  }
  std::sort(sorted.begin(), sorted.end());
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  for (int i = 0; i < 400000; ++i) {
    // Floats of every magnitude: random bit patterns (NaNs skipped), and exact midpoints
    // between neighbours, where ties to even decide.
    float x;
    if (i % 2 == 0) {
      const std::uint32_t u = any_bits(rng);
      x = std::bit_cast<float>(u);
      if (std::isnan(x)) continue;
    } else {
      const auto k = std::uniform_int_distribution<std::size_t>(0, sorted.size() - 2)(rng);
      x = static_cast<float>((sorted[k].first + sorted[k + 1].first) / 2);
    }
    const float got = H(x);
    float want = nearest<H>(sorted, x, overflow_at);
    if (want == 0) want = std::copysign(0.0f, x);  // what rounds to zero keeps its sign
    INFO("x = " << x << " (bits 0x" << std::hex << std::bit_cast<std::uint32_t>(x) << ")");
    REQUIRE(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want));
  }
}

}  // namespace

TEST_CASE("Half and BFloat16 round-trip every bit pattern through float", "[tensor][half]") {
  check_round_trips<Half>();
  check_round_trips<BFloat16>();
}

TEST_CASE("float to Half rounds to nearest, ties to even, overflowing at 65520", "[tensor][half]") {
  check_rounding<Half>(65520.0);
  CHECK(static_cast<float>(Half(65519.0f)) == 65504.0f);
  CHECK(std::isinf(static_cast<float>(Half(65520.0f))));
  CHECK(static_cast<float>(Half(std::ldexp(1.0f, -24))) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(static_cast<float>(Half(std::ldexp(1.0f, -25))) == 0.0f);                    // a tie: to even (zero)
  CHECK(std::signbit(static_cast<float>(Half(-0.0f))));
  CHECK(std::isnan(static_cast<float>(Half(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("float to BFloat16 rounds to nearest, ties to even", "[tensor][half]") {
  // bfloat16's largest finite value is 0x7f7f (about 3.39e38); floats at or past the
  // midpoint to the next step (2^128) round to infinity.
  const double max = static_cast<float>(BFloat16::from_bits(0x7f7f));
  check_rounding<BFloat16>(max + std::ldexp(1.0, 127 - 8));
  CHECK(static_cast<float>(BFloat16(1.00390625f)) == 1.0f);   // 1 + 2^-8: a tie, to even
  CHECK(static_cast<float>(BFloat16(1.01171875f)) == 1.015625f);  // 1 + 3*2^-8: a tie, up to even
  CHECK(std::isinf(static_cast<float>(BFloat16(std::numeric_limits<float>::infinity()))));
  CHECK(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
}
