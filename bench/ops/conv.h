// bench_ops convolution group: f32 conv2d forward, backward-input and backward-weight
// (NCHW, square kernels, groups 1) on the benchmark models' layer shapes.
#pragma once

#include "ops/common.h"
#include "ops/timing.h"

#include "dtrain/tensor/cpu_kernels.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::bench {

struct ConvCase {
  std::string name;
  std::int64_t n, c, hw, o, k, stride, pad;  // input (n, c, hw, hw), weight (o, c, k, k)
  std::int64_t out() const { return (hw + 2 * pad - k) / stride + 1; }
  Conv2dParams params() const { return {.stride_h = stride, .stride_w = stride, .pad_h = pad, .pad_w = pad}; }
};

namespace conv_detail {

inline std::vector<ConvCase> cases(bool quick) {
  if (quick) {
    return {{"lenet_b64_conv1", 64, 1, 28, 32, 5, 1, 2},
            {"lenet_b64_conv2", 64, 32, 14, 64, 5, 1, 2},
            {"resnet18_b16_l3_3x3", 16, 256, 14, 256, 3, 1, 1}};
  }
  return {
      {"lenet_b64_conv1", 64, 1, 28, 32, 5, 1, 2},
      {"lenet_b64_conv2", 64, 32, 14, 64, 5, 1, 2},
      {"resnet18_b16_stem_7x7s2", 16, 3, 224, 64, 7, 2, 3},
      {"resnet18_b16_l1_3x3", 16, 64, 56, 64, 3, 1, 1},
      {"resnet18_b16_l2_3x3", 16, 128, 28, 128, 3, 1, 1},
      {"resnet18_b16_l3_3x3", 16, 256, 14, 256, 3, 1, 1},
      {"resnet18_b16_l4_3x3", 16, 512, 7, 512, 3, 1, 1},
      {"resnet18_b16_l2_down_3x3s2", 16, 64, 56, 128, 3, 2, 1},
      {"resnet18_b16_l2_proj_1x1s2", 16, 64, 56, 128, 1, 2, 0},
      {"cifar_resnet_b128_3x3", 128, 64, 32, 64, 3, 1, 1},
      // ResNet-18 with the CIFAR stem at batch 32 (bench_train --model resnet18_cifar).
      {"resnet18c_b32_stem_3x3", 32, 3, 32, 64, 3, 1, 1},
      {"resnet18c_b32_l1_3x3", 32, 64, 32, 64, 3, 1, 1},
      {"resnet18c_b32_l2_3x3", 32, 128, 16, 128, 3, 1, 1},
      {"resnet18c_b32_l3_3x3", 32, 256, 8, 256, 3, 1, 1},
      {"resnet18c_b32_l4_3x3", 32, 512, 4, 512, 3, 1, 1},
      // Around Winograd's threshold of the output positions of 32 whole 4x4 tiles
      // (cpu_kernels.h, ConvAlgorithm): a batch slice's share of the layers above, and
      // ResNet-50's at batch 8. Tiles: those the outputs fill (7x7 fills 49/64 of its four).
      {"resnet18c_b16_l3_3x3", 16, 256, 8, 256, 3, 1, 1},      // 64 tiles
      {"resnet18c_b8_l3_3x3", 8, 256, 8, 256, 3, 1, 1},        // 32
      {"resnet18c_b16_l4_3x3", 16, 512, 4, 512, 3, 1, 1},      // 16
      {"resnet18c_b64_l4_3x3", 64, 512, 4, 512, 3, 1, 1},      // 64
      {"resnet50_b8_l4_3x3", 8, 512, 7, 512, 3, 1, 1},         // 24.5
      {"resnet50_b4_l3_3x3", 4, 256, 14, 256, 3, 1, 1},        // 49
      {"resnet50_b4_l1_3x3", 4, 64, 56, 64, 3, 1, 1},          // 784
      // Few channels: ResNet-20 (CIFAR, 16-64 channels; the ImageNet trainer's tests) at batch 32.
      {"resnet20_b32_l1_3x3", 32, 16, 32, 16, 3, 1, 1},
      {"resnet20_b32_l2_3x3", 32, 32, 16, 32, 3, 1, 1},
      {"resnet20_b32_l3_3x3", 32, 64, 8, 64, 3, 1, 1},
  };
}

// The three directions of a direct convolution in double, in one loop nest: y = conv(x, w),
// dx = conv_backward_input(g, w), dw = conv_backward_weight(g, x).
struct Reference {
  std::vector<double> y, dx, dw;
};

inline Reference reference(const ConvCase& c, std::int64_t n, const std::vector<double>& x,
                           const std::vector<double>& w, const std::vector<double>& g) {
  const std::int64_t H = c.hw, OH = c.out(), K = c.k;
  Reference r{std::vector<double>(static_cast<std::size_t>(n * c.o * OH * OH)), std::vector<double>(x.size()),
              std::vector<double>(w.size())};
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t o = 0; o < c.o; ++o)
      for (std::int64_t ci = 0; ci < c.c; ++ci)
        for (std::int64_t kh = 0; kh < K; ++kh)
          for (std::int64_t kw = 0; kw < K; ++kw) {
            const std::int64_t wi = ((o * c.c + ci) * K + kh) * K + kw;
            double dw = 0;
            for (std::int64_t oh = 0; oh < OH; ++oh) {
              const std::int64_t ih = oh * c.stride - c.pad + kh;
              if (ih < 0 || ih >= H) continue;
              for (std::int64_t ow = 0; ow < OH; ++ow) {
                const std::int64_t iw = ow * c.stride - c.pad + kw;
                if (iw < 0 || iw >= H) continue;
                const std::int64_t xi = ((b * c.c + ci) * H + ih) * H + iw, yi = ((b * c.o + o) * OH + oh) * OH + ow;
                r.y[yi] += x[xi] * w[wi];
                r.dx[xi] += g[yi] * w[wi];
                dw += g[yi] * x[xi];
              }
            }
            r.dw[wi] += dw;
          }
  return r;
}

// The convolution algorithm setting this run measures.
inline const char* algorithm_name() {
  switch (cpu_conv_algorithm()) {
    case ConvAlgorithm::Auto: return "auto";
    case ConvAlgorithm::Direct: return "direct";
    case ConvAlgorithm::Winograd: return "winograd";
  }
  return "?";
}

// Batch of the validation run: the case's channels and image size, 2 samples (enough for
// the batch loop, cheap enough for the reference).
constexpr std::int64_t kCheckBatch = 2;

// Each direction's largest error against the reference, over the reference's largest value.
inline std::array<double, 3> validate(const ConvCase& c) {
  const Tensor x = random_tensor({kCheckBatch, c.c, c.hw, c.hw}, 3);
  const Tensor w = random_tensor({c.o, c.c, c.k, c.k}, 4);
  const Tensor g = random_tensor({kCheckBatch, c.o, c.out(), c.out()}, 5);
  const Reference r = reference(c, kCheckBatch, to_double(x), to_double(w), to_double(g));
  const Conv2dParams p = c.params();
  return {check_close(fmt::format("conv2d {} (batch {})", c.name, kCheckBatch), to_double(conv2d(x, w, Tensor(), p)),
                      r.y, kSumTolerance),
          check_close(fmt::format("conv2d_backward_input {} (batch {})", c.name, kCheckBatch),
                      to_double(conv2d_backward_input(g, w, x.shape(), p)), r.dx, kSumTolerance),
          check_close(fmt::format("conv2d_backward_weight {} (batch {})", c.name, kCheckBatch),
                      to_double(conv2d_backward_weight(g, x, w.shape(), p)), r.dw, kSumTolerance)};
}

}  // namespace conv_detail

inline void run_conv(const OpsContext& ctx) {
  using namespace conv_detail;
  bool header = false;
  for (const ConvCase& c : cases(ctx.options.quick)) {
    if (!selected(ctx, "conv", c.name)) continue;
    const std::array<double, 3> error = validate(c);
    const Tensor x = random_tensor({c.n, c.c, c.hw, c.hw}, 3);
    const Tensor w = random_tensor({c.o, c.c, c.k, c.k}, 4);
    const Tensor g = random_tensor({c.n, c.o, c.out(), c.out()}, 5);
    const Conv2dParams p = c.params();
    const char* ops[] = {"conv2d", "conv2d_backward_input", "conv2d_backward_weight"};
    const std::vector<Timing> t = time_in_turn({[&] { (void)conv2d(x, w, Tensor(), p); },
                                                [&] { (void)conv2d_backward_input(g, w, x.shape(), p); },
                                                [&] { (void)conv2d_backward_weight(g, x, w.shape(), p); }},
                                               ctx.min_seconds);
    // The same multiply-adds in every direction.
    const double flops = 2.0 * static_cast<double>(c.n * c.o * c.out() * c.out() * c.c * c.k * c.k);
    const std::string shape = fmt::format("{}x{}x{}x{}", c.n, c.c, c.hw, c.hw);
    const std::string kernel = fmt::format("{}->{} {}x{}/{} p{}", c.c, c.o, c.k, c.k, c.stride, c.pad);
    if (!ctx.options.json && !header) {
      fmt::print("\nconv2d f32 NCHW, convolution algorithm {} (DTRAIN_CPU_CONV_ALGO); GFLOP/s = 2 N O OH OW C KH "
                 "KW / time, the direct method's multiply-adds (Winograd does fewer), medians; error = max |error| / "
                 "max |value| against an f64 reference at batch 2 (under auto, by the algorithm auto takes "
                 "there)\n",
                 algorithm_name());
      fmt::print("{:<28}{:>14}{:>19}  {:<24}{:>9}{:>17}{:>8}{:>10}{:>10}\n", "case", "input", "C->O KxK/s pad", "op",
                 "GFLOP/s", "[min, max]", "%peak", "ms", "error");
      header = true;
    }
    for (std::size_t i = 0; i < 3; ++i) {
      const double gf = flops / t[i].median / 1e9;
      if (ctx.options.json) {
        nlohmann::ordered_json j = {
            {"bench", "ops"}, {"group", "conv"}, {"op", ops[i]}, {"case", c.name}, {"shape", shape},
            {"out_channels", c.o}, {"kernel", c.k}, {"stride", c.stride}, {"pad", c.pad},
            {"threads", ctx.options.threads}, {"algorithm", algorithm_name()}, {"reps", t[i].reps},
            {"gflops", round4(gf)},
            {"gflops_min", round4(flops / t[i].max / 1e9)}, {"gflops_max", round4(flops / t[i].min / 1e9)},
            {"peak_fraction", round4(gf / ctx.peak_gflops)}, {"time_ms_median", round4(1e3 * t[i].median)},
            {"max_error_relative", error[i]}};
        fmt::print("{}\n", j.dump());
        continue;
      }
      fmt::print("{:<28}{:>14}{:>19}  {:<24}{:>9.1f}  [{:>6.1f},{:>6.1f}]{:>7.1f}%{:>10.2f}{:>10.1e}\n",
                 i == 0 ? c.name : "", i == 0 ? shape : "", i == 0 ? kernel : "", ops[i], gf, flops / t[i].max / 1e9,
                 flops / t[i].min / 1e9, 100 * gf / ctx.peak_gflops, 1e3 * t[i].median, error[i]);
    }
  }
}

}  // namespace dtrain::bench
