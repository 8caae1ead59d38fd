// The sum of f(j) for j in [0, n) over kLanes interleaved partial sums added at the end: the
// adds stay independent, so a loop inlined into an instruction-set clone (isa_clones.h)
// vectorizes without reassociating anything the source does not, and every clone computes
// the same bits. f may also write element j (it is called once per j, in order).
#pragma once

#include <cstdint>

namespace dtrain::detail::cpu {

inline constexpr std::int64_t kLanes = 16;

template <class T, class F>
[[gnu::always_inline]] inline T lane_sum(std::int64_t n, F f) {
  T acc[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (std::int64_t l = 0; l < kLanes; ++l) acc[l] = acc[l] + f(j + l);
  for (; j < n; ++j) acc[0] = acc[0] + f(j);
  T total = 0;
  for (T a : acc) total += a;
  return total;
}

}  // namespace dtrain::detail::cpu
