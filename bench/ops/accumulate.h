// bench_ops accumulate group: adding a weight gradient into one already held, as gradient
// accumulation and every pipeline micro-batch after the first do, for the GEMM layers of the
// benchmark MLPs: matmul_add_ (the GEMM adds into the gradient, beta 1: what linear's
// backward runs) against the matmul into a temporary plus add_ that it replaced, timed in
// turn. GFLOP/s counts the product's 2 m n k for both, so the ratio is the time ratio.
#pragma once

#include "ops/common.h"
#include "ops/timing.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dtrain::bench {

inline void run_accumulate(const OpsContext& ctx) {
  struct Case {
    std::string name;
    std::int64_t rows, out, in;  // dW (out, in) += g^T (rows, out) x (rows, in)
  };
  // The 784-wide MLP's hidden layer at 32- and 128-row micro-batches (batch 256 and 1024 in
  // 8), and the 512-wide one's at 64 rows.
  const std::vector<Case> cases = {
      {"dw_784_rows32", 32, 784, 784}, {"dw_784_rows128", 128, 784, 784}, {"dw_512_rows64", 64, 512, 512}};
  bool header = false;
  for (const Case& c : cases) {
    if (!selected(ctx, "accumulate", c.name)) continue;
    const Tensor g = random_tensor({c.rows, c.out}, 11), x = random_tensor({c.rows, c.in}, 12);
    Tensor fused_grad = random_tensor({c.out, c.in}, 13);
    Tensor passes_grad = fused_grad.clone();
    const auto fused = [&] { matmul_add_(fused_grad, g, x, true, false); };
    const auto passes = [&] { add_(passes_grad, matmul(g, x, true, false)); };
    fused();
    passes();
    check_close(c.name, to_double(fused_grad), to_double(passes_grad), 1e-4);

    const std::vector<Timing> t = time_in_turn({fused, passes}, ctx.min_seconds);
    const double flops = 2.0 * static_cast<double>(c.rows * c.out * c.in);
    auto gflops = [&](double seconds) { return flops / seconds / 1e9; };
    if (ctx.options.json) {
      nlohmann::ordered_json j = {{"bench", "ops"},
                                  {"group", "accumulate"},
                                  {"case", c.name},
                                  {"rows", c.rows},
                                  {"out", c.out},
                                  {"in", c.in},
                                  {"threads", ctx.options.threads},
                                  {"reps", t[0].reps},
                                  {"fused_gflops", round4(gflops(t[0].median))},
                                  {"passes_gflops", round4(gflops(t[1].median))},
                                  {"fused_us_median", round4(1e6 * t[0].median)},
                                  {"passes_us_median", round4(1e6 * t[1].median)},
                                  {"speedup", round4(t[1].median / t[0].median)}};
      fmt::print("{}\n", j.dump());
      continue;
    }
    if (!header) {
      fmt::print(
          "\nWeight-gradient accumulation, f32; GFLOP/s = 2 m n k / time, medians; matmul_add_ (beta 1) "
          "against matmul + add_\n");
      fmt::print("{:<24}{:>16}{:>11}{:>12}{:>10}\n", "case", "rows x out x in", "fused", "passes", "speedup");
      header = true;
    }
    fmt::print("{:<24}{:>16}{:>11.2f}{:>12.2f}{:>9.2f}x\n", c.name, fmt::format("{}x{}x{}", c.rows, c.out, c.in),
               gflops(t[0].median), gflops(t[1].median), t[1].median / t[0].median);
  }
}

}  // namespace dtrain::bench
