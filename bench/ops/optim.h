// bench_ops optim group: one SGD-with-momentum update (momentum 0.9, as the training
// benches use) on the parameter counts of the MLP, the LeNet CNN and ResNet-18, fused
// (sgd_momentum_step_, what SGD::step runs) against the add_/mul_ passes it replaced, timed
// in turn. GB/s counts the fused update's traffic (parameter, gradient and buffer read,
// parameter and buffer written once) for both, so the ratio is the time ratio.
#pragma once

#include "ops/common.h"
#include "ops/timing.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace dtrain::bench {

inline void run_optim(const OpsContext& ctx) {
  const SgdMomentumStep step{.lr = 0.01, .momentum = 0.9};
  // Parameter counts: mlp 784-512-512-10, the LeNet CNN, ResNet-18 (CIFAR).
  const std::vector<std::pair<std::string, std::int64_t>> sizes = {
      {"mlp", 669706}, {"cnn", 3274634}, {"resnet18", 11173962}};
  bool header = false;
  for (const auto& [model, numel] : sizes) {
    const std::string name = "sgd_momentum_" + model;
    if (!selected(ctx, "optim", name)) continue;
    const Tensor grad = random_tensor({numel}, 8);
    Tensor p_fused = random_tensor({numel}, 9), buf_fused = random_tensor({numel}, 10);
    Tensor p_passes = p_fused.clone(), buf_passes = buf_fused.clone();
    const auto fused = [&] { sgd_momentum_step_(p_fused, buf_fused, grad, step); };
    const auto passes = [&] {
      mul_(buf_passes, step.momentum);
      add_(buf_passes, grad, 1 - step.dampening);
      add_(p_passes, buf_passes, -step.lr);
    };
    fused();
    passes();
    check_close(name, to_double(p_fused), to_double(p_passes), 1e-6);

    const std::vector<Timing> t = time_in_turn({fused, passes}, ctx.min_seconds);
    const double bytes = 4.0 * 5 * static_cast<double>(numel);
    auto gbps = [&](double seconds) { return bytes / seconds / 1e9; };
    if (ctx.options.json) {
      nlohmann::ordered_json j = {{"bench", "ops"},
                                  {"group", "optim"},
                                  {"case", name},
                                  {"numel", numel},
                                  {"threads", ctx.options.threads},
                                  {"reps", t[0].reps},
                                  {"fused_gbps", round4(gbps(t[0].median))},
                                  {"passes_gbps", round4(gbps(t[1].median))},
                                  {"fused_us_median", round4(1e6 * t[0].median)},
                                  {"passes_us_median", round4(1e6 * t[1].median)},
                                  {"speedup", round4(t[1].median / t[0].median)}};
      fmt::print("{}\n", j.dump());
      continue;
    }
    if (!header) {
      fmt::print("\nSGD momentum update, f32; GB/s = 5 x 4 bytes per parameter / time, medians; fused against "
                 "the mul_/add_/add_ passes\n");
      fmt::print("{:<24}{:>10}{:>11}{:>12}{:>10}\n", "case", "params", "fused", "passes", "speedup");
      header = true;
    }
    fmt::print("{:<24}{:>10}{:>11.2f}{:>12.2f}{:>9.2f}x\n", name, numel, gbps(t[0].median), gbps(t[1].median),
               t[1].median / t[0].median);
  }
}

}  // namespace dtrain::bench
