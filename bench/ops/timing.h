// Timing for bench_ops: implementations of one case run in turn, rep by rep, so that on
// a shared, noisy machine every one of them sees the same load, and their ratio means
// something even when the absolute figures drift.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace dtrain::bench {

// Seconds per call of one implementation: median and spread.
struct Timing {
  double median = 0, min = 0, max = 0;
  int reps = 0;
};

inline Timing summarize(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  const std::size_t n = seconds.size();
  const double median = n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  return {median, seconds.front(), seconds.back(), static_cast<int>(n)};
}

// Calls each of `impls` once to warm up (first-touch pages, allocator, packed buffers),
// then each in turn until every one has run at least 3 times and for `min_seconds` in all.
inline std::vector<Timing> time_in_turn(const std::vector<std::function<void()>>& impls, double min_seconds) {
  using Clock = std::chrono::steady_clock;
  for (const auto& f : impls) f();
  std::vector<std::vector<double>> seconds(impls.size());
  std::vector<double> total(impls.size(), 0.0);
  auto done = [&] {
    for (std::size_t i = 0; i < impls.size(); ++i) {
      if (seconds[i].size() < 3 || total[i] < min_seconds) return false;
    }
    return true;
  };
  while (!done()) {
    for (std::size_t i = 0; i < impls.size(); ++i) {
      const auto start = Clock::now();
      impls[i]();
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      seconds[i].push_back(s);
      total[i] += s;
    }
  }
  std::vector<Timing> out;
  for (auto& s : seconds) out.push_back(summarize(std::move(s)));
  return out;
}

}  // namespace dtrain::bench
