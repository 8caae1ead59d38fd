// What every bench_ops group shares: the run's options, case selection, random inputs,
// checking a result against a reference.
#pragma once

#include "dtrain/core/error.h"
#include "dtrain/tensor/ops.h"

#include "bench_stats.h"  // round4, machine_description

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::bench {

struct OpsOptions {
  int threads = 1;
  std::string filter;  // substring of "group/case"; empty: everything
  bool quick = false;
  bool json = false;
};

// The run as the groups see it.
struct OpsContext {
  OpsOptions options;
  double peak_gflops;   // measured single-thread fp32 peak
  double min_seconds;   // each implementation of a case is timed for at least this long
};

inline bool selected(const OpsContext& ctx, const std::string& group, const std::string& name) {
  return (group + "/" + name).find(ctx.options.filter) != std::string::npos;
}

// Uniform in [low, high), by default activation- and weight-like magnitudes. Each seed
// gives its own data.
inline Tensor random_tensor(const Shape& shape, std::uint64_t seed, double low = -1, double high = 1) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  uniform_(t, low, high, &gen);
  return t;
}

inline std::vector<double> to_double(const Tensor& t) { return t.contiguous().to_vector<double>(); }

// max |got - ref| <= tol * max |ref|, or a dtrain::Error naming the case; returns
// max |got - ref| / max |ref|. Relative to the largest reference value because f32 rounding
// grows with the magnitude of the sums.
inline double check_close(const std::string& what, const std::vector<double>& got, const std::vector<double>& ref,
                        double tol) {
  DTRAIN_CHECK(got.size() == ref.size(), "validation failed: {}: {} values, the reference has {}", what, got.size(),
               ref.size());
  double err = 0, scale = 0;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double e = std::abs(got[i] - ref[i]);
    if (std::isnan(e)) {
      err = e, worst = i;
      break;
    }
    if (e > err) err = e, worst = i;
    scale = std::max(scale, std::abs(ref[i]));
  }
  DTRAIN_CHECK(err <= tol * scale,
               "validation failed: {}: max abs error {:.3g} at element {} (got {}, reference {}) exceeds {:g} x max "
               "|reference| = {:.3g}",
               what, err, worst, got[worst], ref[worst], tol, tol * scale);
  return scale > 0 ? err / scale : err;
}

// Tolerances: sums of up to a few thousand f32 products (GEMM, convolution, reductions),
// and element-wise maps, whose error is one op's rounding.
constexpr double kSumTolerance = 1e-3;
constexpr double kMapTolerance = 1e-5;

}  // namespace dtrain::bench
