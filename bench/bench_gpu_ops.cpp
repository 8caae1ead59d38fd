// bench_gpu_ops: the speed of dtrain's CUDA ops through the public ops API (built only
// with CUDA; needs a device to run).
//   gemm  f32 matmul (square sizes and ResNet-50's classifier at batch 256) as TFLOP/s,
//         against cuBLAS called directly on the same device buffers and stream: the
//         ceiling for dtrain's matmul, which is cuBLAS plus dispatch and an allocation
//   conv  conv2d forward, backward-input and backward-weight on ResNet-50 layers at
//         batch 64, as TFLOP/s (the PyTorch peer: bench/peers/pytorch_gpu_ops.py)
//
//   bench_gpu_ops [--device cuda:N] [--filter gemm|conv|<case>] [--json]
//
// Each case is first checked against dtrain's CPU ops on the same inputs (themselves
// checked by bench_ops and the tests). An implementation is timed as a run of calls
// followed by one device synchronization, long enough (>= 20 ms) that the host's launch
// gaps and the synchronization are noise; runs alternate between the implementations.
// DTRAIN_ALLOW_TF32=1 lets both dtrain and the direct cuBLAS calls use TF32 tensor cores.
#include "dtrain/tensor/ops.h"
#include "dtrain/tensor/stream.h"

#include "bench_stats.h"
#include "ops/common.h"
#include "ops/conv.h"
#include "ops/timing.h"

#include <CLI/CLI.hpp>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>

namespace {

using namespace dtrain;

struct Options {
  std::string device = "cuda";
  std::string filter;
  bool json = false;
};

struct Run {
  Options options;
  Device device;
  bool tf32;
};

bool selected(const Run& r, const std::string& group, const std::string& name) {
  return (group + "/" + name).find(r.options.filter) != std::string::npos;
}

void check_status(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(fmt::format("{} failed: {}", call, cublasGetStatusString(s)));
}

// Inputs as bench_ops makes them (ops/common.h), on the device.
Tensor random_on(const Shape& shape, std::uint64_t seed, Device device) {
  return bench::random_tensor(shape, seed).to(device);
}

// bench_ops's check (ops/common.h) of a device result against the CPU's.
void check_close(const std::string& what, const Tensor& gpu, const Tensor& cpu, double tol) {
  bench::check_close(what, bench::to_double(gpu.to(Device::cpu())), bench::to_double(cpu), tol);
}

// Seconds per call of each implementation: each timed as `calls` calls and one
// synchronization, `calls` chosen from a first run to take about 20 ms.
std::vector<bench::Timing> time_on_device(const Run& r, const std::vector<std::function<void()>>& impls) {
  const auto once = [&](const std::function<void()>& f, int calls) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    synchronize(r.device);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::vector<int> calls;
  for (const auto& f : impls) {
    once(f, 1);  // warm-up: cuDNN/cuBLAS plans, cached memory
    calls.push_back(static_cast<int>(std::clamp(0.02 / std::max(once(f, 1), 1e-6), 1.0, 1000.0)));
  }
  std::vector<std::function<void()>> runs;
  for (std::size_t i = 0; i < impls.size(); ++i) runs.push_back([&, i] { once(impls[i], calls[i]); });
  std::vector<bench::Timing> t = bench::time_in_turn(runs, 0.3);
  for (std::size_t i = 0; i < t.size(); ++i) {
    t[i].median /= calls[i], t[i].min /= calls[i], t[i].max /= calls[i];
  }
  return t;
}

double tflops(double flops, double seconds) { return flops / seconds / 1e12; }

// C (m x n) = op(A) op(B), row-major; A stored (k, m) when ta, B stored (n, k) when tb.
struct GemmCase {
  std::string name;
  std::int64_t m, n, k;
  bool ta = false, tb = false;
};

void run_gemm(const Run& r) {
  cublasHandle_t handle = nullptr;
  check_status(cublasCreate(&handle), "cublasCreate");
  check_status(cublasSetStream(handle, static_cast<cudaStream_t>(device_stream(r.device))), "cublasSetStream");
  check_status(cublasSetMathMode(handle, r.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
               "cublasSetMathMode");
  const std::vector<GemmCase> cases = {
      {"square_1024", 1024, 1024, 1024}, {"square_4096", 4096, 4096, 4096}, {"square_8192", 8192, 8192, 8192},
      // ResNet-50's classifier (2048 -> 1000) at batch 256, as autograd computes it.
      {"resnet50_b256_fc_fwd", 256, 1000, 2048, false, true},
      {"resnet50_b256_fc_bwd_x", 256, 2048, 1000},
      {"resnet50_b256_fc_bwd_w", 1000, 2048, 256, true, false},
  };
  bool header = false;
  for (const GemmCase& g : cases) {
    if (!selected(r, "gemm", g.name)) continue;
    const Tensor a = random_on(g.ta ? Shape{g.k, g.m} : Shape{g.m, g.k}, 1, r.device);
    const Tensor b = random_on(g.tb ? Shape{g.n, g.k} : Shape{g.k, g.n}, 2, r.device);
    Tensor c = Tensor::empty({g.m, g.n}, {DType::f32, r.device});
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first.
    const float one = 1, zero = 0;
    auto direct = [&] {
      check_status(cublasSgemm(handle, g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, g.ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                               static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k), &one,
                               b.data<float>(), static_cast<int>(g.tb ? g.k : g.n), a.data<float>(),
                               static_cast<int>(g.ta ? g.m : g.k), &zero, c.data<float>(), static_cast<int>(g.n)),
                   "cublasSgemm");
    };
    const std::string what = fmt::format("gemm {} ({}x{}x{})", g.name, g.m, g.n, g.k);
    const double tol = r.tf32 ? 1e-2 : 1e-3;
    if (g.m * g.n * g.k <= (std::int64_t{1} << 32)) {  // the CPU reference takes seconds beyond
      const Tensor expected = matmul(a.to(Device::cpu()), b.to(Device::cpu()), g.ta, g.tb);
      check_close("dtrain " + what, matmul(a, b, g.ta, g.tb), expected, tol);
      direct();
      check_close("cuBLAS " + what, c, expected, tol);
    }
    const auto t = time_on_device(r, {[&] { (void)matmul(a, b, g.ta, g.tb); }, direct});
    const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
    const double ours = tflops(flops, t[0].median), theirs = tflops(flops, t[1].median);
    const std::string shape = fmt::format("{}x{}x{}", g.m, g.n, g.k);
    if (r.options.json) {
      fmt::print("{}\n", nlohmann::ordered_json{{"bench", "gpu_ops"}, {"group", "gemm"}, {"case", g.name},
                                                {"shape", shape}, {"device", r.device.str()}, {"tf32", r.tf32},
                                                {"tflops", bench::round4(ours)},
                                                {"cublas_tflops", bench::round4(theirs)},
                                                {"vs_cublas", bench::round4(ours / theirs)}}
                             .dump());
      continue;
    }
    if (!header) {
      fmt::print("\nGEMM f32{} C(m x n) = op(A) op(B); TFLOP/s = 2mnk / time, medians\n", r.tf32 ? " (TF32 allowed)" : "");
      fmt::print("{:<26}{:>18}{:>10}{:>10}{:>14}\n", "case", "m x n x k", "dtrain", "cuBLAS", "dtrain/cuBLAS");
      header = true;
    }
    fmt::print("{:<26}{:>18}{:>10.2f}{:>10.2f}{:>14.3f}\n", g.name, shape, ours, theirs, ours / theirs);
  }
  cublasDestroy(handle);
}

using bench::ConvCase;  // ops/conv.h: input (n, c, hw, hw), weight (o, c, k, k)

void run_conv(const Run& r) {
  // ResNet-50 at batch 64: the stem, a bottleneck of each stage (1x1 reduce, 3x3, 1x1
  // expand) and a strided 3x3.
  const std::vector<ConvCase> cases = {
      {"resnet50_b64_stem_7x7s2", 64, 3, 224, 64, 7, 2, 3},
      {"resnet50_b64_l1_1x1_reduce", 64, 256, 56, 64, 1, 1, 0},
      {"resnet50_b64_l1_3x3", 64, 64, 56, 64, 3, 1, 1},
      {"resnet50_b64_l1_1x1_expand", 64, 64, 56, 256, 1, 1, 0},
      {"resnet50_b64_l2_3x3s2", 64, 128, 56, 128, 3, 2, 1},
      {"resnet50_b64_l3_3x3", 64, 256, 14, 256, 3, 1, 1},
      {"resnet50_b64_l4_3x3", 64, 512, 7, 512, 3, 1, 1},
  };
  bool header = false;
  for (const ConvCase& c : cases) {
    if (!selected(r, "conv", c.name)) continue;
    const Conv2dParams p = c.params();
    const Tensor x = random_on({c.n, c.c, c.hw, c.hw}, 1, r.device);
    const Tensor w = random_on({c.o, c.c, c.k, c.k}, 2, r.device);
    const Tensor g = random_on({c.n, c.o, c.out(), c.out()}, 3, r.device);
    const double tol = r.tf32 ? 1e-2 : 1e-3;
    // Validated on 2 images: the CPU reference of the full batch takes too long.
    {
      const Tensor xs = x.narrow(0, 0, 2).contiguous(), gs = g.narrow(0, 0, 2).contiguous();
      const Tensor xc = xs.to(Device::cpu()), wc = w.to(Device::cpu()), gc = gs.to(Device::cpu());
      check_close(c.name + " forward", conv2d(xs, w, Tensor(), p), conv2d(xc, wc, Tensor(), p), tol);
      check_close(c.name + " backward-input", conv2d_backward_input(gs, w, xs.shape(), p),
                  conv2d_backward_input(gc, wc, xc.shape(), p), tol);
      check_close(c.name + " backward-weight", conv2d_backward_weight(gs, xs, w.shape(), p),
                  conv2d_backward_weight(gc, xc, wc.shape(), p), tol);
    }
    const auto t = time_on_device(r, {[&] { (void)conv2d(x, w, Tensor(), p); },
                                      [&] { (void)conv2d_backward_input(g, w, x.shape(), p); },
                                      [&] { (void)conv2d_backward_weight(g, x, w.shape(), p); }});
    const double flops = 2.0 * static_cast<double>(c.n * c.o * c.out() * c.out()) * static_cast<double>(c.c * c.k * c.k);
    const double fwd = tflops(flops, t[0].median), bwd_x = tflops(flops, t[1].median), bwd_w = tflops(flops, t[2].median);
    if (r.options.json) {
      fmt::print("{}\n", nlohmann::ordered_json{{"bench", "gpu_ops"}, {"group", "conv"}, {"case", c.name},
                                                {"device", r.device.str()}, {"tf32", r.tf32},
                                                {"fwd_tflops", bench::round4(fwd)},
                                                {"bwd_input_tflops", bench::round4(bwd_x)},
                                                {"bwd_weight_tflops", bench::round4(bwd_w)}}
                             .dump());
      continue;
    }
    if (!header) {
      fmt::print("\nconv2d f32{} NCHW; TFLOP/s = 2 N O OH OW C KH KW / time, medians\n",
                 r.tf32 ? " (TF32 allowed)" : "");
      fmt::print("{:<30}{:>10}{:>12}{:>13}\n", "case", "forward", "bwd-input", "bwd-weight");
      header = true;
    }
    fmt::print("{:<30}{:>10.2f}{:>12.2f}{:>13.2f}\n", c.name, fwd, bwd_x, bwd_w);
  }
}

int run(const Options& options) {
  const Device device = Device::parse(options.device);
  DTRAIN_CHECK(device.is_cuda(), "--device: expected cuda or cuda:N, got {}", options.device);
  const char* tf32_env = std::getenv("DTRAIN_ALLOW_TF32");
  const Run r{options, device, tf32_env != nullptr && std::string(tf32_env) == "1"};
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device.index) != cudaSuccess) {
    throw Error(fmt::format("{}: {}", device.str(), cuda::unavailable_reason()));
  }
  if (options.json) {
    fmt::print("{}\n", nlohmann::ordered_json{{"bench", "gpu_ops"}, {"machine", bench::machine_description()},
                                              {"gpu", prop.name}, {"tf32", r.tf32}}
                           .dump());
  } else {
    fmt::print("bench_gpu_ops: {} ({}, {} SMs, {:.0f} GiB); {}\n", device.str(), prop.name, prop.multiProcessorCount,
               static_cast<double>(prop.totalGlobalMem) / (1 << 30), bench::machine_description());
  }
  run_gemm(r);
  run_conv(r);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Speed of dtrain's CUDA ops (GEMM against direct cuBLAS, convolution)", "bench_gpu_ops"};
  Options options;
  app.add_option("--device", options.device, "cuda or cuda:N")->capture_default_str();
  app.add_option("--filter", options.filter, "run the cases whose \"group/case\" contains this, e.g. gemm, conv");
  app.add_flag("--json", options.json, "print JSON lines (the machine, then one per case) instead of tables");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(options);
  } catch (const dtrain::Error& e) {
    fmt::print(stderr, "bench_gpu_ops: error: {}\n", e.message());
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_gpu_ops: error: {}\n", e.what());
  }
  return 1;
}
