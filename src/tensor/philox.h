// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// a counter-based generator. philox(counter, key) is a pure function, so element i of a
// tensor can be drawn from counter offset + i by any thread, on the host or a GPU, and the
// result never depends on how the work was split.
#pragma once

#include "dtrain/core/host_device.h"

#include <cstdint>

namespace dtrain::detail {

struct PhiloxBlock {
  std::uint32_t v[4];
};

namespace philox_internal {
constexpr std::uint32_t kMul0 = 0xD2511F53u;
constexpr std::uint32_t kMul1 = 0xCD9E8D57u;
constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

DTRAIN_HD inline void round(std::uint32_t c[4], std::uint32_t k0, std::uint32_t k1) {
  std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c[0];
  std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c[2];
  std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
  std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
  c[0] = hi1 ^ c[1] ^ k0;
  c[1] = lo1;
  c[2] = hi0 ^ c[3] ^ k1;
  c[3] = lo0;
}
}  // namespace philox_internal

// Ten rounds on a 128-bit counter under a 64-bit key.
DTRAIN_HD inline PhiloxBlock philox4x32_10(PhiloxBlock counter, std::uint32_t k0, std::uint32_t k1) {
  using namespace philox_internal;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    round(counter.v, k0, k1);
  }
  return counter;
}

// The four 32-bit words for a 64-bit counter (upper half of the 128 bits zero) under
// the seed as key.
DTRAIN_HD inline PhiloxBlock philox4x32_10(std::uint64_t counter, std::uint64_t seed) {
  PhiloxBlock c{{static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32), 0u, 0u}};
  return philox4x32_10(c, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// Uniform in [0, 1) from 24 random bits (every float in the range is exact).
DTRAIN_HD inline float uniform_float(std::uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}
// Uniform in [0, 1) from 53 random bits.
DTRAIN_HD inline double uniform_double(std::uint32_t lo, std::uint32_t hi) {
  std::uint64_t bits = (static_cast<std::uint64_t>(hi) << 32 | lo) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

}  // namespace dtrain::detail
