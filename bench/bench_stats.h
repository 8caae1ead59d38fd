// Step-time statistics the training benchmarks share: medians with the spread, rounded
// for JSON output, and the machine line every bench binary prints once.
#pragma once

#include "dtrain/core/environment.h"

#include "bench_machine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace dtrain::bench {

struct Stats {
  double median_ms, min_ms, max_ms;
};

// JSON figures keep 4 decimals: more would be noise, the spread between steps is larger.
inline double round4(double v) { return std::round(v * 1e4) / 1e4; }

inline Stats stats(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  const std::size_t n = seconds.size();
  const double median = n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  return {round4(1e3 * median), round4(1e3 * seconds.front()), round4(1e3 * seconds.back())};
}

// "AMD EPYC, 2 hardware threads".
inline std::string machine_description() {
  return fmt::format("{}, {} hardware threads", cpu_model(), env::hardware_threads());
}

}  // namespace dtrain::bench
