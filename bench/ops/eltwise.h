// bench_ops element-wise group: memory-bound f32 maps and reductions on a (rows, 1024)
// tensor. GB/s counts each input read once and the output written once, the least
// traffic the op can do; every call allocates its output, as in training.
#pragma once

#include "ops/common.h"
#include "ops/timing.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::bench {

namespace eltwise_detail {

constexpr std::int64_t kCols = 1024;

using Values = std::vector<double>;

struct EltwiseOp {
  const char* name;
  bool binary;       // two inputs (a, b), else one (a)
  bool positive;     // inputs in [0, 1): sums that do not cancel keep the tolerance meaningful
  double tolerance;
  std::function<Tensor(const Tensor& a, const Tensor& b)> run;
  // The result in double from the inputs (b empty for unary ops) of shape (rows, kCols).
  std::function<Values(const Values& a, const Values& b, std::int64_t rows)> reference;
};

inline Values map(const Values& a, const std::function<double(std::size_t)>& f) {
  Values out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = f(i);
  return out;
}

inline std::vector<EltwiseOp> ops() {
  return {
      {"add", true, false, kMapTolerance, [](const Tensor& a, const Tensor& b) { return add(a, b); },
       [](const Values& a, const Values& b, std::int64_t) { return map(a, [&](std::size_t i) { return a[i] + b[i]; }); }},
      {"mul", true, false, kMapTolerance, [](const Tensor& a, const Tensor& b) { return mul(a, b); },
       [](const Values& a, const Values& b, std::int64_t) { return map(a, [&](std::size_t i) { return a[i] * b[i]; }); }},
      {"relu", false, false, kMapTolerance, [](const Tensor& a, const Tensor&) { return relu(a); },
       [](const Values& a, const Values&, std::int64_t) {
         return map(a, [&](std::size_t i) { return std::max(a[i], 0.0); });
       }},
      {"exp", false, false, kMapTolerance, [](const Tensor& a, const Tensor&) { return exp(a); },
       [](const Values& a, const Values&, std::int64_t) { return map(a, [&](std::size_t i) { return std::exp(a[i]); }); }},
      {"sum", false, true, kSumTolerance, [](const Tensor& a, const Tensor&) { return sum(a); },
       [](const Values& a, const Values&, std::int64_t) {
         double s = 0;
         for (double v : a) s += v;
         return Values{s};
       }},
      {"sum_dim0", false, true, kSumTolerance, [](const Tensor& a, const Tensor&) { return sum(a, {0}); },
       [](const Values& a, const Values&, std::int64_t rows) {
         Values out(kCols, 0.0);
         for (std::int64_t r = 0; r < rows; ++r)
           for (std::int64_t j = 0; j < kCols; ++j) out[j] += a[r * kCols + j];
         return out;
       }},
      {"sum_dim1", false, true, kSumTolerance, [](const Tensor& a, const Tensor&) { return sum(a, {1}); },
       [](const Values& a, const Values&, std::int64_t rows) {
         Values out(static_cast<std::size_t>(rows), 0.0);
         for (std::int64_t r = 0; r < rows; ++r)
           for (std::int64_t j = 0; j < kCols; ++j) out[r] += a[r * kCols + j];
         return out;
       }},
      {"softmax_dim1", false, false, kMapTolerance, [](const Tensor& a, const Tensor&) { return softmax(a, 1); },
       [](const Values& a, const Values&, std::int64_t rows) {
         Values out(a.size());
         for (std::int64_t r = 0; r < rows; ++r) {
           const double* in = a.data() + r * kCols;
           const double mx = *std::max_element(in, in + kCols);
           double s = 0;
           for (std::int64_t j = 0; j < kCols; ++j) s += out[r * kCols + j] = std::exp(in[j] - mx);
           for (std::int64_t j = 0; j < kCols; ++j) out[r * kCols + j] /= s;
         }
         return out;
       }},
  };
}

}  // namespace eltwise_detail

inline void run_eltwise(const OpsContext& ctx) {
  using namespace eltwise_detail;
  bool header = false;
  const std::vector<std::int64_t> sizes =
      ctx.options.quick ? std::vector<std::int64_t>{1 << 20} : std::vector<std::int64_t>{1 << 20, 1 << 24};
  for (std::int64_t numel : sizes) {
    const std::int64_t rows = numel / kCols;
    for (const EltwiseOp& op : ops()) {
      const std::string name = fmt::format("{}_{}M", op.name, numel >> 20);
      if (!selected(ctx, "eltwise", name)) continue;
      const Tensor a = random_tensor({rows, kCols}, 6, op.positive ? 0 : -1, 1);
      const Tensor b = op.binary ? random_tensor({rows, kCols}, 7) : Tensor();
      const Tensor result = op.run(a, b);
      check_close(fmt::format("{} ({}x{})", name, rows, kCols), to_double(result),
                  op.reference(to_double(a), op.binary ? to_double(b) : Values{}, rows), op.tolerance);

      const Timing t = time_in_turn({[&] { (void)op.run(a, b); }}, ctx.min_seconds)[0];
      const std::int64_t bytes = 4 * ((op.binary ? 2 : 1) * numel + result.numel());
      auto gbps = [&](double seconds) { return static_cast<double>(bytes) / seconds / 1e9; };
      const std::string shape = fmt::format("{}x{}", rows, kCols);
      if (ctx.options.json) {
        nlohmann::ordered_json j = {
            {"bench", "ops"}, {"group", "eltwise"}, {"op", op.name}, {"case", name}, {"shape", shape},
            {"numel", numel}, {"bytes", bytes}, {"threads", ctx.options.threads}, {"reps", t.reps},
            {"gbps", round4(gbps(t.median))}, {"gbps_min", round4(gbps(t.max))}, {"gbps_max", round4(gbps(t.min))},
            {"time_us_median", round4(1e6 * t.median)}};
        fmt::print("{}\n", j.dump());
        continue;
      }
      if (!header) {
        fmt::print("\nelement-wise and reductions, f32; GB/s = (inputs read + output written once) / time, medians\n");
        fmt::print("{:<18}{:>12}{:>9}{:>17}{:>11}\n", "case", "shape", "GB/s", "[min, max]", "us");
        header = true;
      }
      fmt::print("{:<18}{:>12}{:>9.2f}  [{:>6.2f},{:>6.2f}]{:>11.1f}\n", name, shape, gbps(t.median), gbps(t.max),
                 gbps(t.min), 1e6 * t.median);
    }
  }
}

}  // namespace dtrain::bench
