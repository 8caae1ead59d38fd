// bench_ops GEMM group: f32 C = op(A) op(B) through dtrain::matmul, against Eigen's GEMM
// (single-threaded, ops/eigen_gemm.h) and OpenBLAS's cblas_sgemm when CMake found it, on
// the same operands, in the same layouts, timed in turn.
#pragma once

#include "ops/common.h"
#include "ops/eigen_gemm.h"
#include "ops/timing.h"

#if defined(DTRAIN_BENCH_OPENBLAS)
#include <cblas.h>
#endif

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace dtrain::bench {

// One product; the transposes are matmul's: A is stored (k, m) when transpose_a, B is
// stored (n, k) when transpose_b, both row-major.
struct GemmCase {
  std::string name;
  std::int64_t m, n, k;
  bool transpose_a = false, transpose_b = false;
};

namespace gemm_detail {

// The three products of a Linear layer (in -> out) at batch b, as dtrain's autograd
// computes them: y = x @ W^T, grad_x = g @ W, grad_W = g^T @ x.
inline void add_linear(std::vector<GemmCase>& cases, const std::string& prefix, std::int64_t b, std::int64_t in,
                       std::int64_t out) {
  cases.push_back({prefix + "_fwd", b, out, in, false, true});
  cases.push_back({prefix + "_bwd_x", b, in, out, false, false});
  cases.push_back({prefix + "_bwd_w", out, in, b, true, false});
}

inline std::vector<GemmCase> cases(bool quick) {
  std::vector<GemmCase> cases;
  for (std::int64_t s : quick ? std::vector<std::int64_t>{256, 512} : std::vector<std::int64_t>{256, 512, 1024, 2048}) {
    cases.push_back({fmt::format("square_{}", s), s, s, s});
  }
  // MLP 784-512-512-10 and the LeNet CNN's 3136 -> 1024 layer, the benchmark models' GEMMs.
  for (std::int64_t b : quick ? std::vector<std::int64_t>{64} : std::vector<std::int64_t>{64, 256}) {
    add_linear(cases, fmt::format("mlp_b{}_fc1", b), b, 784, 512);
    if (quick) continue;
    add_linear(cases, fmt::format("mlp_b{}_fc2", b), b, 512, 512);
    add_linear(cases, fmt::format("mlp_b{}_fc3", b), b, 512, 10);
  }
  add_linear(cases, "lenet_b64_fc1", 64, 3136, 1024);
  return cases;
}

#if defined(DTRAIN_BENCH_OPENBLAS)
inline void openblas_gemm(const GemmCase& g, const float* a, const float* b, float* c) {
  const auto m = static_cast<blasint>(g.m), n = static_cast<blasint>(g.n), k = static_cast<blasint>(g.k);
  cblas_sgemm(CblasRowMajor, g.transpose_a ? CblasTrans : CblasNoTrans, g.transpose_b ? CblasTrans : CblasNoTrans, m,
              n, k, 1.0f, a, g.transpose_a ? m : k, b, g.transpose_b ? k : n, 0.0f, c, n);
}
#endif

// Validation rows: all of them for small products, else 16 spread over the result
// (the first and last included), enough to catch a wrong block or edge.
inline std::vector<std::int64_t> check_rows(const GemmCase& g) {
  std::vector<std::int64_t> rows;
  const std::int64_t count = g.m * g.n * g.k <= (std::int64_t{1} << 26) ? g.m : std::min<std::int64_t>(16, g.m);
  for (std::int64_t i = 0; i < count; ++i) rows.push_back(count == g.m ? i : i * (g.m - 1) / (count - 1));
  return rows;
}

// Those rows of op(A) op(B) in double.
inline std::vector<double> reference_rows(const GemmCase& g, const std::vector<double>& a,
                                          const std::vector<double>& b, const std::vector<std::int64_t>& rows) {
  std::vector<double> out(rows.size() * static_cast<std::size_t>(g.n), 0.0);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    double* o = out.data() + r * static_cast<std::size_t>(g.n);
    for (std::int64_t p = 0; p < g.k; ++p) {
      const double aip = g.transpose_a ? a[p * g.m + rows[r]] : a[rows[r] * g.k + p];
      for (std::int64_t j = 0; j < g.n; ++j) o[j] += aip * (g.transpose_b ? b[j * g.k + p] : b[p * g.n + j]);
    }
  }
  return out;
}

inline std::vector<double> pick_rows(const float* c, const GemmCase& g, const std::vector<std::int64_t>& rows) {
  std::vector<double> out;
  for (std::int64_t r : rows) out.insert(out.end(), c + r * g.n, c + (r + 1) * g.n);
  return out;
}

inline double gflops(const GemmCase& g, double seconds) {
  return 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) / seconds / 1e9;
}

}  // namespace gemm_detail

// How the OpenBLAS peer is set up, or "not built"; sets its thread count.
inline std::string openblas_setup(int threads) {
#if defined(DTRAIN_BENCH_OPENBLAS)
  openblas_set_num_threads(threads);
  return fmt::format("{}, core {}, {} thread(s)", openblas_get_config(), openblas_get_corename(), threads);
#else
  (void)threads;
  return "not built";
#endif
}

inline void run_gemm(const OpsContext& ctx) {
  using namespace gemm_detail;
  const bool json = ctx.options.json;
  bool header = false;
  for (const GemmCase& g : cases(ctx.options.quick)) {
    if (!selected(ctx, "gemm", g.name)) continue;
    const Tensor a = random_tensor(g.transpose_a ? Shape{g.k, g.m} : Shape{g.m, g.k}, 1);
    const Tensor b = random_tensor(g.transpose_b ? Shape{g.n, g.k} : Shape{g.k, g.n}, 2);
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    std::vector<float> peer_out(static_cast<std::size_t>(g.m * g.n));

    std::vector<std::function<void()>> impls = {[&] { (void)matmul(a, b, g.transpose_a, g.transpose_b); },
                                                [&] { eigen_gemm(g.transpose_a, g.transpose_b, g.m, g.n, g.k, pa, pb, peer_out.data()); }};
#if defined(DTRAIN_BENCH_OPENBLAS)
    impls.push_back([&] { openblas_gemm(g, pa, pb, peer_out.data()); });
#endif
    // Validate every implementation on these operands before timing any.
    const std::vector<std::int64_t> rows = check_rows(g);
    const std::vector<double> ref = reference_rows(g, to_double(a), to_double(b), rows);
    const std::string what = fmt::format("gemm {} ({}x{}x{})", g.name, g.m, g.n, g.k);
    check_close("dtrain " + what, pick_rows(matmul(a, b, g.transpose_a, g.transpose_b).data<float>(), g, rows), ref,
                kSumTolerance);
    const char* peer_names[] = {"", "Eigen", "OpenBLAS"};
    for (std::size_t i = 1; i < impls.size(); ++i) {
      impls[i]();
      check_close(fmt::format("{} {}", peer_names[i], what), pick_rows(peer_out.data(), g, rows), ref, kSumTolerance);
    }

    const std::vector<Timing> t = time_in_turn(impls, ctx.min_seconds);
    const double dtrain = gflops(g, t[0].median), eigen = gflops(g, t[1].median);
    const double openblas = t.size() > 2 ? gflops(g, t[2].median) : 0;
    const double vs_best = dtrain / std::max(eigen, openblas);
    const std::string shape = fmt::format("{}x{}x{}", g.m, g.n, g.k);
    if (json) {
      nlohmann::ordered_json j = {
          {"bench", "ops"}, {"group", "gemm"}, {"op", "gemm"}, {"case", g.name}, {"shape", shape}, {"m", g.m},
          {"n", g.n}, {"k", g.k}, {"transpose_a", g.transpose_a}, {"transpose_b", g.transpose_b},
          {"threads", ctx.options.threads}, {"reps", t[0].reps}, {"gflops", round4(dtrain)},
          {"gflops_min", round4(gflops(g, t[0].max))}, {"gflops_max", round4(gflops(g, t[0].min))},
          {"peak_fraction", round4(dtrain / ctx.peak_gflops)}, {"eigen_gflops", round4(eigen)}};
      if (t.size() > 2) j["openblas_gflops"] = round4(openblas);
      j["vs_best_peer"] = round4(vs_best);
      fmt::print("{}\n", j.dump());
      continue;
    }
    if (!header) {
      fmt::print("\nGEMM f32, C(m x n) = op(A) op(B) over k; GFLOP/s = 2mnk / time, medians; Eigen on 1 thread\n");
      fmt::print("{:<20}{:>16}{:>9}{:>17}{:>8}{:>9}{:>10}{:>13}\n", "case", "m x n x k", "dtrain", "[min, max]", "%peak",
                 "Eigen", "OpenBLAS", "dtrain/best");
      header = true;
    }
    fmt::print("{:<20}{:>16}{:>9.1f}  [{:>6.1f},{:>6.1f}]{:>7.1f}%{:>9.1f}{:>10}{:>13.2f}\n", g.name, shape, dtrain,
               gflops(g, t[0].max), gflops(g, t[0].min), 100 * dtrain / ctx.peak_gflops, eigen,
               t.size() > 2 ? fmt::format("{:.1f}", openblas) : "-", vs_best);
  }
}

}  // namespace dtrain::bench
