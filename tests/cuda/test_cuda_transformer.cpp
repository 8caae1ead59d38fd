// The transformer ops on CUDA against the CPU: gelu's tanh form and silu with their
// gradients, rms_norm and layer_norm forward and backward (one block per row; the parameters'
// gradients summed over chunks of rows), rope forward and backward and its tables; then the same through
// autograd, and finite-difference checks in f64 on the device.
//
// Tolerances: element-wise math is the same expression on both devices (f32 within a few
// ulps: the device's tanh, exp and sqrt may round differently); the row sums of the norms run
// in another order (f32 1e-5; f64 1e-12).
#include "cuda_test.h"
#include "dtrain/autograd/functions.h"
#include "support/test_support.h"

#include <functional>
#include <string>
#include <vector>

namespace dtrain::test {
namespace {

using Inputs = const std::vector<Variable>&;
using CaseFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

double tolerance(DType dt) { return dt == DType::f64 ? 1e-12 : 1e-5; }

// fn on the CPU inputs and on copies of them on the device: every output must agree.
void check_parity(const std::string& name, const std::vector<Tensor>& inputs, const CaseFn& fn) {
  INFO("case: " << name);
  const std::vector<Tensor> expected = fn(inputs);
  std::vector<Tensor> on_gpu;
  for (const Tensor& t : inputs) on_gpu.push_back(t.defined() ? t.to(kGpu) : t);
  const std::vector<Tensor> got = fn(on_gpu);
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("output " << i);
    REQUIRE(got[i].defined() == expected[i].defined());
    if (!got[i].defined()) continue;
    REQUIRE(got[i].device() == kGpu);
    const double tol = tolerance(expected[i].dtype());
    require_close(got[i].to(Device::cpu()), expected[i], tol, tol);
  }
}

Tensor input(const Shape& shape, std::uint64_t seed, DType dt, double low = -1, double high = 1) {
  return random_tensor(shape, seed, DType::f64, low, high).to(dt);
}

Variable gpu_param(const Shape& shape, std::uint64_t seed, double low = -1, double high = 1) {
  return Variable(random_tensor(shape, seed, DType::f64, low, high).to(kGpu), true);
}

}  // namespace

TEST_CASE("CUDA transformer: gelu_tanh and silu, forward and gradient", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dt : {DType::f32, DType::f64}) {
    const std::string t = dtype_name(dt);
    const Tensor x = input({33, 65}, 1, dt, -8, 8), g = input({33, 65}, 2, dt);
    check_parity("gelu_tanh " + t, {x, g}, [](const auto& in) {
      return std::vector{gelu_tanh(in[0]), binary(BinaryOp::GeluTanhGrad, in[1], in[0])};
    });
    check_parity("silu " + t, {x, g}, [](const auto& in) {
      return std::vector{silu(in[0]), binary(BinaryOp::SiluGrad, in[1], in[0])};
    });
  }
}

TEST_CASE("CUDA transformer: rms_norm forward and backward, with and without a weight", "[cuda]") {
  if (!cuda_ready()) return;
  // Rows of 1 (under a warp), 100 (a partial warp), 1000 (several values per thread); 300
  // rows: more than the weight gradient's 128 chunks.
  for (std::int64_t d : {1, 100, 1000}) {
    for (DType dt : {DType::f32, DType::f64}) {
      const std::string name = fmt::format("D={} {}", d, dtype_name(dt));
      const Tensor x = input({3, 100, d}, 3, dt, -2, 2), w = input({d}, 4, dt, 0.5, 1.5);
      const Tensor g = input({3, 100, d}, 5, dt);
      for (const bool weighted : {true, false}) {
        check_parity(name + (weighted ? " weight" : " no weight"), {x, weighted ? w : Tensor(), g}, [](const auto& in) {
          const RmsNormResult r = rms_norm_forward(in[0], in[1], 1e-6);
          const RmsNormGrads d = rms_norm_backward(in[2], in[0], r.rstd, in[1]);
          return std::vector{r.y, r.rstd, d.x, d.weight};
        });
      }
    }
  }
}

TEST_CASE("CUDA transformer: layer_norm forward and backward, weight and bias each present or not", "[cuda]") {
  if (!cuda_ready()) return;
  for (std::int64_t d : {1, 100, 1000}) {
    for (DType dt : {DType::f32, DType::f64}) {
      const std::string name = fmt::format("D={} {}", d, dtype_name(dt));
      const Tensor x = input({3, 100, d}, 8, dt, -2, 2), w = input({d}, 9, dt, 0.5, 1.5), b = input({d}, 10, dt);
      const Tensor g = input({3, 100, d}, 11, dt);
      for (const bool weighted : {true, false}) {
        for (const bool biased : {true, false}) {
          check_parity(fmt::format("{} weight {} bias {}", name, weighted, biased),
                       {x, weighted ? w : Tensor(), biased ? b : Tensor(), g}, [](const auto& in) {
                         const LayerNormResult r = layer_norm_forward(in[0], in[1], in[2], 1e-5);
                         const LayerNormGrads d =
                             layer_norm_backward(in[3], in[0], r.mean, r.rstd, in[1], in[2].defined());
                         return std::vector{r.y, r.mean, r.rstd, d.x, d.weight, d.bias};
                       });
        }
      }
    }
  }
}

TEST_CASE("CUDA transformer: rope tables, forward and backward, of a contiguous and a transposed input", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dt : {DType::f32, DType::f64}) {
    const std::string t = dtype_name(dt);
    const RopeTables cpu_tables = rope_tables(7, 16, 10000, dt, Device::cpu(), 5);
    const RopeTables gpu_tables = rope_tables(7, 16, 10000, dt, kGpu, 5);
    REQUIRE(gpu_tables.cos.device() == kGpu);
    require_close(gpu_tables.cos.to(Device::cpu()), cpu_tables.cos, 0, 0);
    require_close(gpu_tables.sin.to(Device::cpu()), cpu_tables.sin, 0, 0);
    const Tensor x = input({2, 7, 3, 16}, 6, dt), stored = input({2, 3, 7, 16}, 7, dt);
    check_parity("rope " + t, {x, cpu_tables.cos, cpu_tables.sin}, [](const auto& in) {
      return std::vector{rope_forward(in[0], in[1], in[2]), rope_backward(in[0], in[1], in[2])};
    });
    check_parity("rope transposed " + t, {stored, cpu_tables.cos, cpu_tables.sin},
                 [](const auto& in) { return std::vector{rope_forward(in[0].transpose(1, 2), in[1], in[2])}; });
  }
}

TEST_CASE("CUDA transformer: a Llama-style block's ops through autograd, against the CPU", "[cuda]") {
  if (!cuda_ready()) return;
  // rms_norm -> rope -> SwiGLU gate, with gelu_tanh beside it; every leaf's gradient.
  const Tensor x = input({2, 5, 2, 8}, 8, DType::f32), w = input({8}, 9, DType::f32, 0.5, 1.5);
  const Tensor u = input({2, 5, 2, 8}, 10, DType::f32);
  check_parity("block f32", {x, w, u}, [](const auto& in) {
    Variable xv(in[0], true), wv(in[1], true), uv(in[2], true);
    const RopeTables t = rope_tables(5, 8, 10000, DType::f32, in[0].device());
    Variable h = rotary_embedding(rms_norm(xv, wv, 1e-6), t.cos, t.sin);
    Variable out = add(mul(silu(h), uv), gelu(h, GeluApproximation::Tanh));
    sum(mul(out, out)).backward();
    return std::vector{out.data(), xv.grad(), wv.grad(), uv.grad()};
  });
}

TEST_CASE("CUDA grad: gelu tanh, silu, rms_norm, layer_norm without bias, rotary_embedding", "[cuda][grad]") {
  if (!cuda_ready()) return;
  auto x = gpu_param({3, 7}, 11, -5, 5);
  require_grad_ok([](Inputs in) { return gelu(in[0], GeluApproximation::Tanh); }, {x});
  require_grad_ok([](Inputs in) { return silu(in[0]); }, {x});
  auto y = gpu_param({2, 3, 6}, 12), w = gpu_param({6}, 13, 0.5, 1.5);
  require_grad_ok([](Inputs in) { return rms_norm(in[0], in[1], 1e-6); }, {y, w});
  require_grad_ok([](Inputs in) { return rms_norm(in[0], Variable(), 1e-6); }, {y});
  require_grad_ok([](Inputs in) { return layer_norm(in[0], 1, in[1], Variable(), 1e-5); }, {y, w});
  const RopeTables t = rope_tables(5, 8, 100, DType::f64, kGpu);
  auto r = gpu_param({2, 5, 3, 8}, 14);
  require_grad_ok([t](Inputs in) { return rotary_embedding(in[0], t.cos, t.sin); }, {r});
}

}  // namespace dtrain::test
