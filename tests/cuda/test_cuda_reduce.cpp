// CUDA reductions, argmax and the softmax family against the CPU backend: every case runs
// on both devices from the same inputs (views taken on each device, so strided layouts
// reach the kernels) and must agree within the dtype's tolerance, NaN matching NaN. The
// sizes cover one element, empty tensors, single-block work and reductions long enough to
// be split across blocks; cross-entropy checks the training path through autograd.
#include "cuda_test.h"
#include "dtrain/autograd/functions.h"
#include "support/test_support.h"

#include <fmt/ranges.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace dtrain::test {
namespace {

using Fn = std::function<Tensor(const Tensor&)>;

// Values in [-2, 2) as `dtype` (integers: the values times 10, truncated, so that equal
// elements occur; negative ones wrap for u8 on both devices).
Tensor input(const Shape& shape, std::uint64_t seed, DType dtype) {
  Tensor t = random_tensor(shape, seed, DType::f64, -2, 2);
  return is_floating(dtype) ? t.to(dtype) : mul(t, 10.0).to(dtype);
}

// x as `dtype` with NaN at the given flat positions.
Tensor with_nans(const Tensor& x, const std::vector<std::size_t>& at) {
  std::vector<double> v = x.to_vector<double>();
  for (std::size_t i : at) v[i] = std::numeric_limits<double>::quiet_NaN();
  return Tensor::from_vector<double>(v, x.shape()).to(x.dtype());
}

// Floating sums may differ in rounding order (both devices accumulate in double).
void require_matches(const Tensor& got, const Tensor& expected) {
  REQUIRE(got.device() == kGpu);
  REQUIRE(got.dtype() == expected.dtype());
  REQUIRE(got.shape() == expected.shape());
  double rtol = 0, atol = 0;
  if (expected.dtype() == DType::f32) rtol = 1e-5, atol = 1e-6;
  if (expected.dtype() == DType::f64) rtol = 1e-12, atol = 1e-12;
  const std::vector<double> a = got.to(Device::cpu()).to_vector<double>();
  const std::vector<double> b = expected.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i << ": " << a[i] << " (cuda) vs " << b[i] << " (cpu)");
    if (std::isnan(b[i])) REQUIRE(std::isnan(a[i]));
    else if (std::isinf(b[i])) REQUIRE(a[i] == b[i]);
    else REQUIRE(std::abs(a[i] - b[i]) <= atol + rtol * std::abs(b[i]));
  }
}

void check(const std::string& name, const Tensor& x, const Fn& fn) {
  INFO("case: " << name);
  require_matches(fn(x.to(kGpu)), fn(x));
}

const std::vector<DType> kAllDtypes{DType::f32, DType::f64, DType::i64, DType::i32, DType::u8};

std::vector<DType> dtypes_for(ReduceOp op) {
  if (op == ReduceOp::Mean) return {DType::f32, DType::f64};
  return kAllDtypes;
}

const char* name_of(ReduceOp op) {
  static constexpr const char* kNames[] = {"sum", "mean", "max", "min"};
  return kNames[static_cast<int>(op)];
}

constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min};

}  // namespace

TEST_CASE("CUDA reduce: every op, dtype and set of dims, contiguous and strided", "[cuda]") {
  if (!cuda_ready()) return;
  const std::vector<std::vector<std::int64_t>> dim_sets{{}, {0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}};
  for (ReduceOp op : kOps) {
    for (DType dt : dtypes_for(op)) {
      const Tensor x = input({6, 7, 9}, 11, dt);
      for (const auto& dims : dim_sets) {
        const std::string name = fmt::format("{} {} over [{}]", name_of(op), dtype_name(dt), fmt::join(dims, ","));
        check(name, x, [&](const Tensor& t) { return reduce(op, t, dims, false); });
        check(name + " keepdim", x, [&](const Tensor& t) { return reduce(op, t, dims, true); });
        check(name + " permuted", x, [&](const Tensor& t) { return reduce(op, t.permute({2, 0, 1}), dims, false); });
        check(name + " sliced", x, [&](const Tensor& t) { return reduce(op, t.slice(2, 1, 9, 2), dims, false); });
      }
    }
  }
}

TEST_CASE("CUDA reduce: size-1, empty and 0-d tensors", "[cuda]") {
  if (!cuda_ready()) return;
  for (ReduceOp op : kOps) {
    const std::string name = name_of(op);
    check(name + " over a size-1 dim", input({5, 1, 3}, 1, DType::f32),
          [&](const Tensor& t) { return reduce(op, t, {1}, false); });
    check(name + " of one element", input({1, 1}, 2, DType::f64),
          [&](const Tensor& t) { return reduce(op, t, {}, false); });
    check(name + " of a 0-d tensor", Tensor::scalar(3.5), [&](const Tensor& t) { return reduce(op, t, {}, false); });
    // No outputs at all.
    check(name + " keeping an empty dim", Tensor::zeros({0, 4}),
          [&](const Tensor& t) { return reduce(op, t, {1}, false); });
  }
  // Reducing an empty dim: sums are 0, means 0/0 = NaN (max and min refuse it).
  check("sum over an empty dim", Tensor::zeros({0, 4}), [](const Tensor& t) { return sum(t, {0}); });
  check("i32 sum over an empty dim", Tensor::zeros({3, 0}, {DType::i32}), [](const Tensor& t) { return sum(t, {1}); });
  check("mean over an empty dim", Tensor::zeros({0, 4}), [](const Tensor& t) { return mean(t, {0}); });
}

TEST_CASE("CUDA reduce: large reductions split across blocks", "[cuda]") {
  if (!cuda_ready()) return;
  for (ReduceOp op : kOps) {
    const std::string name = name_of(op);
    // A loss: everything into one value.
    const Tensor flat = input({1 << 20}, 3, DType::f32);
    check(name + " of 1M elements", flat, [&](const Tensor& t) { return reduce(op, t, {}, false); });
    check(name + " of 1M f64 elements, strided", input({1 << 21}, 4, DType::f64),
          [&](const Tensor& t) { return reduce(op, t.slice(0, 1, 1 << 21, 2), {}, false); });
    // Column sums (bias gradient of a linear layer) and row sums of (N, C).
    const Tensor nc = input({8192, 300}, 5, DType::f32);
    check(name + " over N of (N, C)", nc, [&](const Tensor& t) { return reduce(op, t, {0}, false); });
    check(name + " over C of (N, C)", nc, [&](const Tensor& t) { return reduce(op, t, {1}, false); });
    check(name + " over N of a transposed (C, N)", nc,
          [&](const Tensor& t) { return reduce(op, t.t(), {1}, false); });
    // Per-channel sums (bias gradient of a convolution).
    check(name + " over N, H, W of (N, C, H, W)", input({32, 16, 24, 24}, 6, DType::f32),
          [&](const Tensor& t) { return reduce(op, t, {0, 2, 3}, false); });
  }
  check("i32 column sums into i64", input({70000, 3}, 7, DType::i32), [](const Tensor& t) { return sum(t, {0}); });
  check("u8 sum of 1M elements into i64", input({1 << 20}, 8, DType::u8), [](const Tensor& t) { return sum(t); });
}

TEST_CASE("CUDA reduce: max and min propagate NaN, sums too", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor x = with_nans(input({64, 300}, 9, dt), {5, 300 * 7 + 299, 300 * 40 + 11, 300 * 40 + 12});
    for (ReduceOp op : kOps)
      for (const std::vector<std::int64_t>& dims : {std::vector<std::int64_t>{}, {0}, {1}})
        check(fmt::format("{} {} with NaN over [{}]", name_of(op), dtype_name(dt), fmt::join(dims, ",")), x,
              [&](const Tensor& t) { return reduce(op, t, dims, false); });
  }
  const float inf = std::numeric_limits<float>::infinity();
  check("max and min of infinities", Tensor::from_vector<float>({-inf, -inf, inf, -inf, 1, inf}, {3, 2}),
        [](const Tensor& t) { return cat({max(t, {1}), min(t, {1}), max(t, {0}), min(t, {0})}, 0); });
}

TEST_CASE("CUDA argmax: first index of the maximum, NaN counting as the largest", "[cuda]") {
  if (!cuda_ready()) return;
  // Values from {0, 1, 2, 3}: ties everywhere.
  const Tensor ties = random_tensor({40, 33, 5}, 12, DType::f64, 0, 4);
  for (DType dt : kAllDtypes) {
    const Tensor x = ties.to(dt);
    for (std::int64_t d = 0; d < 3; ++d) {
      const std::string name = fmt::format("argmax {} over dim {}", dtype_name(dt), d);
      check(name, x, [&](const Tensor& t) { return argmax(t, d); });
      check(name + " keepdim", x, [&](const Tensor& t) { return argmax(t, d, true); });
      check(name + " permuted", x, [&](const Tensor& t) { return argmax(t.permute({1, 2, 0}), d); });
    }
  }
  for (DType dt : {DType::f32, DType::f64}) {
    // Row 0 has two NaNs (the first wins), row 3 one, column 2 of rows 0 and 5 NaN.
    const Tensor x = with_nans(input({8, 30}, 13, dt), {2, 17, 3 * 30 + 29, 5 * 30 + 2});
    for (std::int64_t d : {0, 1})
      check(fmt::format("argmax {} with NaN over dim {}", dtype_name(dt), d), x,
            [d](const Tensor& t) { return argmax(t, d); });
  }
  const float inf = std::numeric_limits<float>::infinity();
  check("argmax of all -inf rows", Tensor::full({4, 9}, -inf), [](const Tensor& t) { return argmax(t, 1); });
  check("argmax over a size-1 dim", input({6, 1}, 14, DType::f32), [](const Tensor& t) { return argmax(t, 1); });
  check("argmax of an empty batch", Tensor::zeros({0, 10}), [](const Tensor& t) { return argmax(t, 1); });
  // Long rows (one block each, split) and long columns.
  const Tensor big = random_tensor({3, 200000}, 15, DType::f64, 0, 1000).to(DType::i32);
  check("argmax along 200000 elements", big, [](const Tensor& t) { return argmax(t, 1); });
  check("argmax down 200000-row columns", big, [](const Tensor& t) { return argmax(t.t().contiguous(), 0); });
}

TEST_CASE("CUDA softmax and log_softmax, forward and backward", "[cuda]") {
  if (!cuda_ready()) return;
  struct Shaped {
    Shape shape;
    std::int64_t dim;
  };
  // Short and long rows (10 classes, 1000, longer than a block), inner dims, one element.
  const std::vector<Shaped> cases{{{8, 10}, 1},  {{4, 1000}, -1}, {{3, 5000}, 1}, {{6, 7, 9}, 0}, {{6, 7, 9}, 1},
                                  {{6, 7, 9}, 2}, {{5, 300, 3}, 1}, {{7, 1}, 1},   {{7, 1}, 0},   {{0, 10}, 1}};
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Shaped& c : cases) {
      const std::string name = fmt::format("{} {} dim {}", shape_str(c.shape), dtype_name(dt), c.dim);
      const Tensor x = mul(input(c.shape, 20, dt), 4.0);  // logits in [-8, 8)
      const Tensor g = input(c.shape, 21, dt);
      const std::int64_t d = c.dim;
      check("softmax " + name, x, [d](const Tensor& t) { return softmax(t, d); });
      check("log_softmax " + name, x, [d](const Tensor& t) { return log_softmax(t, d); });
      // Backward from the CPU forward, so that only the backward differs.
      const Tensor y = softmax(x, d), ly = log_softmax(x, d);
      check("softmax_backward " + name, g, [&](const Tensor& t) { return softmax_backward(t, y.to(t.device()), d); });
      check("log_softmax_backward " + name, g,
            [&](const Tensor& t) { return log_softmax_backward(t, ly.to(t.device()), d); });
    }
    const Tensor x = input({12, 10}, 22, dt);
    check(fmt::format("softmax of a transposed {}", dtype_name(dt)), x,
          [](const Tensor& t) { return softmax(t.t(), 1); });
    check(fmt::format("log_softmax of a sliced {}", dtype_name(dt)), x,
          [](const Tensor& t) { return log_softmax(t.slice(1, 0, 10, 3), 1); });
    check(fmt::format("softmax_backward with a transposed grad {}", dtype_name(dt)), x, [](const Tensor& t) {
      const Tensor y = softmax(t.t().contiguous(), 0);
      return softmax_backward(t.t(), y, 0);
    });
    check(fmt::format("softmax of a 0-d {}", dtype_name(dt)), Tensor::scalar(1.5, {dt}),
          [](const Tensor& t) { return softmax(t, 0); });
  }
  // Extreme logits: no overflow, and -inf logits get probability 0.
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor extreme = Tensor::from_vector<float>({1e4f, -1e4f, 0, 88, 89, -inf, 3, 3}, {2, 4});
  check("softmax of extreme logits", extreme, [](const Tensor& t) { return softmax(t, 1); });
  check("log_softmax of extreme logits", extreme, [](const Tensor& t) { return log_softmax(t, 1); });
  check("softmax of a row with NaN", with_nans(input({3, 6}, 23, DType::f32), {8}),
        [](const Tensor& t) { return softmax(t, 1); });
}

TEST_CASE("CUDA softmax and cross-entropy gradients through autograd", "[cuda]") {
  if (!cuda_ready()) return;
  struct Result {
    Tensor loss, grad;
  };
  // The loss and d loss / d logits on `device`.
  auto run = [](const Tensor& logits, const Tensor& labels, double smoothing, Device device) {
    Variable v(logits.to(device), true);
    Variable loss = cross_entropy(v, labels.to(device), smoothing);
    loss.backward();
    return Result{loss.data(), v.grad()};
  };
  struct Shaped {
    std::int64_t n, c;
  };
  for (const Shaped& s : {Shaped{64, 10}, Shaped{256, 1000}, Shaped{1, 3}}) {
    for (DType dt : {DType::f32, DType::f64}) {
      for (DType label_dt : {DType::i64, DType::i32}) {
        for (double smoothing : {0.0, 0.1}) {
          INFO("cross_entropy (" << s.n << ", " << s.c << ") " << dtype_name(dt) << " labels "
                                 << dtype_name(label_dt) << " smoothing " << smoothing);
          const Tensor logits = mul(input({s.n, s.c}, 30, dt), 3.0);
          const Tensor labels = random_tensor({s.n}, 31, DType::f64, 0, static_cast<double>(s.c)).to(label_dt);
          const Result cpu = run(logits, labels, smoothing, Device::cpu());
          const Result gpu = run(logits, labels, smoothing, kGpu);
          require_matches(gpu.loss, cpu.loss);
          require_matches(gpu.grad, cpu.grad);
        }
      }
    }
  }
  // A label outside [0, C) on the GPU is not read back (no host wait): the loss is NaN.
  {
    const Tensor logits = input({4, 3}, 34, DType::f32);
    for (std::int64_t bad : {-1, 3}) {
      INFO("label " << bad);
      const Tensor labels = Tensor::from_vector<std::int64_t>({0, bad, 2, 1}, {4});
      CHECK(std::isnan(run(logits, labels, 0, kGpu).loss.item()));
      CHECK_THROWS_WITH(run(logits, labels, 0, Device::cpu()), Catch::Contains("labels must lie in [0, 3)"));
    }
  }
  // softmax and log_softmax as autograd functions, with a non-trivial upstream gradient.
  for (bool log : {false, true}) {
    INFO((log ? "log_softmax" : "softmax") << " through autograd");
    const Tensor x = input({16, 37}, 32, DType::f32), g = input({16, 37}, 33, DType::f32);
    auto grad_on = [&](Device device) {
      Variable v(x.to(device), true);
      Variable y = log ? log_softmax(v, 1) : softmax(v, 1);
      y.backward(g.to(device));
      return v.grad();
    };
    require_matches(grad_on(kGpu), grad_on(Device::cpu()));
  }
}

}  // namespace dtrain::test
