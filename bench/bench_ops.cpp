// bench_ops: the speed of dtrain's CPU kernels through the public ops API, case by case.
//   gemm     f32 matmul: square sizes and the benchmark models' layer products, as GFLOP/s,
//            the fraction of the measured peak, and Eigen (1 thread) and OpenBLAS (when
//            found at configure time) on the same operands, timed in turn with dtrain's
//   conv     conv2d forward, backward-input, backward-weight on LeNet and ResNet-18 layers
//   eltwise  add, mul, relu, exp, sums, softmax on 1M and 16M elements, as GB/s
//   optim    the fused SGD momentum update against the passes it replaced, as GB/s
//   accumulate  a weight gradient added into the held one by the GEMM (matmul_add_) against
//            matmul + add_, as GFLOP/s
//
//   bench_ops [--threads T] [--filter gemm|conv|eltwise|optim|accumulate|<case>] [--quick] [--json]
//
// Every case is first checked against a plain double-precision reference (GEMM rows,
// direct convolution at batch 2, plain loops); a mismatch names the case and exits 1.
// The peak is one core's fp32 FMA throughput, measured at startup (ops/peak.h), times the
// threads used. dtrain's ops allocate their outputs on every call, as in training; the
// peers write into one preallocated buffer.
//
// Peers at their best: the Eigen peer is compiled with -march=native (ops/eigen_gemm.h);
// OpenBLAS picks its kernels from OPENBLAS_CORETYPE when it loads, and the environment's
// Haswell halves it on AVX-512 CPUs, so run `OPENBLAS_CORETYPE=SkylakeX bench_ops` there.
#include "dtrain/core/environment.h"
#include "dtrain/core/parallel.h"

#include "ops/accumulate.h"
#include "ops/conv.h"
#include "ops/eltwise.h"
#include "ops/gemm.h"
#include "ops/isa.h"
#include "ops/optim.h"
#include "ops/peak.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace {

using namespace dtrain;

// Seconds each implementation of a case is timed for (at least 3 calls).
constexpr double kMinSeconds = 0.3;
constexpr double kQuickMinSeconds = 0.1;

int run(const bench::OpsOptions& options) {
  set_num_threads(options.threads);
  const bench::Peak peak = bench::measure_peak();
  const int cores = std::min(options.threads, env::hardware_threads());
  const bench::OpsContext ctx{options, peak.gflops * cores, options.quick ? kQuickMinSeconds : kMinSeconds};
  const std::string machine = bench::machine_description();
  const std::string openblas = bench::openblas_setup(options.threads);

  if (options.json) {
    fmt::print("{}\n", nlohmann::ordered_json{{"bench", "ops"},
                                              {"machine", machine},
                                              {"threads", options.threads},
                                              {"peak_gflops_1thread", bench::round4(peak.gflops)},
                                              {"peak_isa", peak.isa},
                                              {"peak_gflops", bench::round4(ctx.peak_gflops)},
                                              {"build_isa", bench::compiled_isa()},
                                              {"loops_isa", bench::cloned_loops_isa()},
                                              {"eigen", fmt::format("1 thread, {}", bench::eigen_gemm_isa())},
                                              {"openblas", openblas}}
                           .dump());
  } else {
    fmt::print("bench_ops: {} thread(s); {}\n", options.threads, machine);
    fmt::print("peak: {:.1f} GFLOP/s fp32 on 1 thread ({}, measured), x {} core(s) = {:.1f}; %peak is of that\n",
               peak.gflops, peak.isa, cores, ctx.peak_gflops);
    fmt::print(
        "bench compiled for {}, dtrain's element-wise loops run as {}, Eigen peer for {} (1 thread); "
        "openblas: {}\n",
        bench::compiled_isa(), bench::cloned_loops_isa(), bench::eigen_gemm_isa(), openblas);
  }
  bench::run_gemm(ctx);
  bench::run_conv(ctx);
  bench::run_eltwise(ctx);
  bench::run_optim(ctx);
  bench::run_accumulate(ctx);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Speed of dtrain's CPU ops (GEMM, convolution, element-wise) against Eigen and OpenBLAS", "bench_ops"};
  bench::OpsOptions options;
  app.add_option("--threads", options.threads, "intra-op threads (dtrain and OpenBLAS; Eigen stays on 1)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--filter", options.filter,
                 "run the cases whose \"group/case\" contains this, e.g. gemm, conv, "
                 "eltwise, optim, accumulate, mlp_b256, resnet18");
  app.add_flag("--quick", options.quick, "fewer cases, each timed for 0.1 s instead of 0.3 s");
  app.add_flag("--json", options.json, "print JSON lines (the machine, then one per case) instead of tables");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(options);
  } catch (const dtrain::Error& e) {
    fmt::print(stderr, "bench_ops: error: {}\n", e.message());
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_ops: error: {}\n", e.what());
  }
  return 1;
}
