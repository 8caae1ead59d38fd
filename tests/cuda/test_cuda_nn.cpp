// The library-backed CUDA primitives against the CPU backend: matmul (cuBLAS), 2-D
// convolution (cuDNN), pooling and batch normalization (own kernels), each computed on
// both devices from the same inputs, and a small conv + batch-norm + linear model's
// forward and backward through autograd.
//
// Tolerances: the pooling kernels add in the CPU's order and max pooling only compares,
// so those agree to rounding at most. f32 matmul and convolution sum in another order than
// oneDNN (different blocking, and cuDNN may pick Winograd or FFT algorithms), hence
// rtol = atol = 1e-4: loose for fp32 rounding, yet tight enough to catch TF32 (products
// rounded to 10 mantissa bits, ~1e-3 relative), which must stay off by default. f64 agrees
// to 1e-10.
#include "cuda_test.h"
#include "dtrain/autograd/functions.h"
#include "support/test_support.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::test {
namespace {

struct Tolerance {
  double rtol, atol;
};
constexpr Tolerance kExactish{1e-6, 1e-7};   // f32, same summation order as the CPU
constexpr Tolerance kLibraryF32{1e-4, 1e-4};  // f32 through cuBLAS / cuDNN vs oneDNN
constexpr Tolerance kF64{1e-10, 1e-12};

Tolerance tolerance(DType dt, Tolerance f32) { return dt == DType::f64 ? kF64 : f32; }

using CaseFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Runs fn on the CPU inputs and on copies of them on the device; every output must agree
// (integer outputs exactly).
void check_parity(const std::string& name, const std::vector<Tensor>& inputs, const CaseFn& fn, Tolerance tol) {
  INFO("case: " << name);
  const std::vector<Tensor> expected = fn(inputs);
  std::vector<Tensor> on_gpu;
  for (const Tensor& t : inputs) on_gpu.push_back(t.to(kGpu));
  const std::vector<Tensor> got = fn(on_gpu);
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("output " << i);
    REQUIRE(got[i].device() == kGpu);
    REQUIRE(got[i].dtype() == expected[i].dtype());
    const Tensor back = got[i].to(Device::cpu());
    if (is_floating(expected[i].dtype())) require_close(back, expected[i], tol.rtol, tol.atol);
    else require_close(back, expected[i], 0, 0);
  }
}

Tensor input(const Shape& shape, std::uint64_t seed, DType dt, double low = -1, double high = 1) {
  return random_tensor(shape, seed, DType::f64, low, high).to(dt);
}

// Small integers (-2..2) in a scrambled order: pooling windows then hold ties.
Tensor with_ties(const Shape& shape, DType dt) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  std::vector<double> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = static_cast<double>((i * 7919) % 5 - 2);
  return Tensor::from_vector(values, shape).to(dt);
}

}  // namespace

// ---- matmul ----------------------------------------------------------------------

TEST_CASE("CUDA nn: matmul of plain, transposed, batched and broadcast operands", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dt : {DType::f32, DType::f64}) {
    const std::string t = dtype_name(dt);
    const Tolerance tol = tolerance(dt, kLibraryF32);
    const Tensor a = input({7, 5}, 1, dt), b = input({5, 3}, 2, dt);
    check_parity("2-D " + t, {a, b}, [](const auto& in) { return std::vector{matmul(in[0], in[1])}; }, tol);
    // Stored transposed: cuBLAS reads them in place with op 'T'.
    const Tensor at = input({5, 7}, 3, dt), bt = input({3, 5}, 4, dt);
    check_parity("transpose_a " + t, {at, b}, [](const auto& in) { return std::vector{matmul(in[0], in[1], true)}; },
                 tol);
    check_parity("transpose_b " + t, {a, bt},
                 [](const auto& in) { return std::vector{matmul(in[0], in[1], false, true)}; }, tol);
    check_parity("both transposed " + t, {at, bt},
                 [](const auto& in) { return std::vector{matmul(in[0], in[1], true, true)}; }, tol);
    // Batched, and a batch of transposed slices times one 2-D matrix: the ops layer cannot
    // fold that batch into rows, so b reaches cuBLAS with batch stride 0.
    const Tensor a3 = input({4, 6, 5}, 5, dt), b3 = input({4, 5, 3}, 6, dt), a3t = input({4, 5, 6}, 7, dt);
    check_parity("batched " + t, {a3, b3}, [](const auto& in) { return std::vector{matmul(in[0], in[1])}; }, tol);
    check_parity("batched transposed x broadcast 2-D " + t, {a3t, b},
                 [](const auto& in) { return std::vector{matmul(in[0], in[1], true)}; }, tol);
    check_parity("batched x 2-D, folded into rows " + t, {a3, b},
                 [](const auto& in) { return std::vector{matmul(in[0], in[1])}; }, tol);
    // Neither of the last two dims unit-stride (every other column): copied first. A
    // stride-0 broadcast of a column: not a valid leading dimension, copied too.
    const Tensor wide = input({7, 10}, 8, dt), column = input({7, 1}, 9, dt);
    check_parity("strided columns " + t, {wide, b},
                 [](const auto& in) { return std::vector{matmul(in[0].slice(1, 0, 10, 2), in[1])}; }, tol);
    check_parity("broadcast column " + t, {column, b},
                 [](const auto& in) { return std::vector{matmul(in[0].expand({7, 5}), in[1])}; }, tol);
    // Empty inner dimension: zeros; empty outer: nothing.
    const Tensor a0 = input({3, 0}, 10, dt), b0 = input({0, 4}, 11, dt);
    check_parity("k = 0 " + t, {a0, b0}, [](const auto& in) { return std::vector{matmul(in[0], in[1])}; }, tol);
    const Tensor m0 = input({0, 5}, 12, dt);
    check_parity("m = 0 " + t, {m0, b}, [](const auto& in) { return std::vector{matmul(in[0], in[1])}; }, tol);
    // Several thread blocks' worth, odd sizes.
    const Tensor big_a = input({257, 300}, 13, dt), big_b = input({300, 129}, 14, dt);
    check_parity("257x300x129 " + t, {big_a, big_b}, [](const auto& in) { return std::vector{matmul(in[0], in[1])}; },
                 tol);
  }
}

// ---- convolution -------------------------------------------------------------------

namespace {

struct ConvCase {
  std::string name;
  Shape x, w;
  Conv2dParams p;
};

std::vector<ConvCase> conv_cases() {
  return {
      {"3x3 pad 1", {2, 3, 9, 8}, {4, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}},
      {"stride 2, asymmetric kernel", {2, 4, 11, 10}, {6, 4, 3, 2}, {2, 2, 1, 0, 1, 1, 1}},
      {"dilation 2, stride (1, 2)", {1, 3, 12, 13}, {5, 3, 3, 3}, {1, 2, 2, 2, 2, 2, 1}},
      {"2 groups", {2, 4, 8, 8}, {6, 2, 3, 3}, {1, 1, 1, 1, 1, 1, 2}},
      {"depthwise", {2, 6, 7, 7}, {6, 1, 3, 3}, {2, 2, 1, 1, 1, 1, 6}},
      {"1x1", {3, 8, 5, 5}, {4, 8, 1, 1}, {1, 1, 0, 0, 1, 1, 1}},
      {"5x5 on 32x32, 16 -> 32 channels", {4, 16, 32, 32}, {32, 16, 5, 5}, {1, 1, 2, 2, 1, 1, 1}},
  };
}

}  // namespace

TEST_CASE("CUDA nn: conv2d forward, backward-input and backward-weight", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dt : {DType::f32, DType::f64}) {
    for (const ConvCase& c : conv_cases()) {
      const std::string name = c.name + " " + dtype_name(dt);
      const Conv2dParams p = c.p;
      const Tensor x = input(c.x, 1, dt), w = input(c.w, 2, dt), bias = input({c.w[0]}, 3, dt);
      const Shape y_shape = conv2d(x, w, Tensor(), p).shape();
      const Tensor grad_y = input(y_shape, 4, dt);
      const Shape x_shape = c.x, w_shape = c.w;
      check_parity(name + ", with and without bias", {x, w, bias},
                   [p](const auto& in) {
                     return std::vector{conv2d(in[0], in[1], in[2], p), conv2d(in[0], in[1], Tensor(), p)};
                   },
                   tolerance(dt, kLibraryF32));
      check_parity(name + ", backward", {grad_y, w, x},
                   [p, x_shape, w_shape](const auto& in) {
                     return std::vector{conv2d_backward_input(in[0], in[1], x_shape, p),
                                        conv2d_backward_weight(in[0], in[2], w_shape, p)};
                   },
                   tolerance(dt, kLibraryF32));
    }
  }
}

TEST_CASE("CUDA nn: conv2d of non-contiguous operands, and a repeated problem", "[cuda]") {
  if (!cuda_ready()) return;
  const Conv2dParams p{1, 1, 1, 1, 1, 1, 1};
  // Spatially transposed input and weight views: made contiguous before cuDNN.
  const Tensor x = input({2, 3, 8, 9}, 5, DType::f32), w = input({4, 3, 3, 3}, 6, DType::f32);
  const CaseFn fn = [p](const auto& in) {
    const Tensor xt = in[0].transpose(2, 3), wt = in[1].transpose(2, 3);
    // The second call reuses the first's plan (descriptors and algorithm).
    return std::vector{conv2d(xt, wt, Tensor(), p), conv2d(xt, wt, Tensor(), p)};
  };
  check_parity("transposed views", {x, w}, fn, kLibraryF32);
}

// ---- pooling -------------------------------------------------------------------------

TEST_CASE("CUDA nn: max_pool2d values, indices (ties, padding) and backward", "[cuda]") {
  if (!cuda_ready()) return;
  const std::vector<std::pair<std::string, Pool2dParams>> params = {
      {"2x2 stride 2", {2, 2, 2, 2, 0, 0, true}},
      {"3x3 stride 2 pad 1 (overlapping)", {3, 3, 2, 2, 1, 1, true}},
      {"3x2 stride 1 pad (1, 0)", {3, 2, 1, 1, 1, 0, true}},
  };
  for (DType dt : {DType::f32, DType::f64}) {
    for (const auto& [pname, p] : params) {
      const std::string name = pname + " " + dtype_name(dt);
      const Pool2dParams q = p;
      for (const Tensor& x : {input({2, 3, 9, 11}, 1, dt), with_ties({2, 3, 9, 11}, dt)}) {
        const Shape x_shape = x.shape();
        const Tensor grad_y = input(max_pool2d(x, q).output.shape(), 2, dt);
        check_parity(name, {x, grad_y},
                     [q, x_shape](const auto& in) {
                       const MaxPoolResult r = max_pool2d(in[0], q);
                       return std::vector{r.output, r.indices, max_pool2d_backward(in[1], r.indices, x_shape)};
                     },
                     tolerance(dt, kExactish));
      }
    }
  }
  // Planes of 256x256: many thread blocks; the input transposed (a strided view).
  const Tensor big = input({2, 4, 256, 256}, 3, DType::f32);
  check_parity("large, transposed input", {big},
               [](const auto& in) {
                 const MaxPoolResult r = max_pool2d(in[0].transpose(2, 3), {3, 3, 2, 2, 1, 1, true});
                 return std::vector{r.output, r.indices};
               },
               kExactish);
}

TEST_CASE("CUDA nn: max_pool2d propagates NaN with its index", "[cuda]") {
  if (!cuda_ready()) return;
  std::vector<float> values(16, 1.0f);
  values[5] = std::nanf("");
  values[6] = 7.0f;
  const Tensor x = Tensor::from_vector(values, {1, 1, 4, 4});
  const MaxPoolResult r = max_pool2d(x.to(kGpu), {2, 2, 2, 2, 0, 0, true});
  const std::vector<float> out = r.output.to(Device::cpu()).to_vector<float>();
  const std::vector<std::int64_t> idx = r.indices.to(Device::cpu()).to_vector<std::int64_t>();
  CHECK(std::isnan(out[0]));
  CHECK(idx[0] == 5);
  CHECK(out[1] == 7.0f);
  CHECK(idx[1] == 6);
}

TEST_CASE("CUDA nn: avg_pool2d with and without counting padding, and backward", "[cuda]") {
  if (!cuda_ready()) return;
  const std::vector<std::pair<std::string, Pool2dParams>> params = {
      {"2x2 stride 2", {2, 2, 2, 2, 0, 0, true}},
      {"3x3 stride 2 pad 1, padding counted", {3, 3, 2, 2, 1, 1, true}},
      {"3x3 stride 2 pad 1, padding not counted", {3, 3, 2, 2, 1, 1, false}},
      {"4x3 stride (1, 3) pad (2, 1)", {4, 3, 1, 3, 2, 1, false}},
  };
  for (DType dt : {DType::f32, DType::f64}) {
    for (const auto& [pname, p] : params) {
      const Pool2dParams q = p;
      const Tensor x = input({2, 3, 10, 9}, 1, dt);
      const Shape x_shape = x.shape();
      const Tensor grad_y = input(avg_pool2d(x, q).shape(), 2, dt);
      check_parity(pname + " " + dtype_name(dt), {x, grad_y},
                   [q, x_shape](const auto& in) {
                     return std::vector{avg_pool2d(in[0], q), avg_pool2d_backward(in[1], x_shape, q)};
                   },
                   tolerance(dt, kExactish));
    }
  }
}

TEST_CASE("CUDA nn: adaptive_avg_pool2d to smaller, equal and larger sizes, and backward", "[cuda]") {
  if (!cuda_ready()) return;
  const std::vector<std::pair<Shape, std::pair<std::int64_t, std::int64_t>>> cases = {
      {{2, 3, 7, 10}, {3, 4}},  // windows of uneven, overlapping sizes
      {{2, 3, 5, 5}, {5, 5}},   // identity
      {{1, 2, 3, 4}, {7, 5}},   // more outputs than inputs
      {{2, 4, 9, 9}, {1, 1}},   // global average
  };
  for (DType dt : {DType::f32, DType::f64}) {
    for (const auto& [shape, out] : cases) {
      const auto [oh, ow] = out;
      const Tensor x = input(shape, 1, dt), grad_y = input({shape[0], shape[1], oh, ow}, 2, dt);
      const Shape x_shape = shape;
      check_parity(fmt::format("{} -> ({}, {}) {}", shape_str(shape), oh, ow, dtype_name(dt)), {x, grad_y},
                   [x_shape, oh, ow](const auto& in) {
                     return std::vector{adaptive_avg_pool2d(in[0], oh, ow),
                                        adaptive_avg_pool2d_backward(in[1], x_shape)};
                   },
                   tolerance(dt, kExactish));
    }
  }
}

// ---- batch normalization ------------------------------------------------------------------

TEST_CASE("CUDA nn: batch_norm forward (mean, biased var) and backward", "[cuda]") {
  if (!cuda_ready()) return;
  // (N, C), (N, C, H, W), and a channel of 2^19 values: many passes of a block's threads.
  const std::vector<Shape> shapes = {{16, 5}, {8, 6, 5, 7}, {2, 3, 512, 512}};
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Shape& shape : shapes) {
      // Offset values: the centred second pass matters.
      const Tensor x = input(shape, 1, dt, 2, 5), grad_y = input(shape, 2, dt);
      const Tensor gamma = input({shape[1]}, 3, dt, 0.5, 1.5), beta = input({shape[1]}, 4, dt);
      const Tolerance tol = tolerance(dt, {1e-4, 1e-5});
      for (bool affine : {true, false}) {
        for (bool relu : {false, true}) {
          const std::string name = fmt::format("{} {}{}{}", shape_str(shape), dtype_name(dt), affine ? "" : ", no affine",
                                               relu ? ", ReLU fused" : "");
          check_parity(name, {x, grad_y, gamma, beta},
                       [affine, relu](const auto& in) {
                         const Tensor g = affine ? in[2] : Tensor(), b = affine ? in[3] : Tensor();
                         const BatchNormResult r = batch_norm_forward(in[0], g, b, 1e-5, relu);
                         const BatchNormGrads grads =
                             batch_norm_backward(in[1], in[0], r.mean, r.var, g, 1e-5, relu ? r.y : Tensor());
                         return std::vector{r.y, r.mean, r.var, grads.x, grads.gamma, grads.beta};
                       },
                       tol);
        }
      }
    }
  }
}

// ---- a small model through autograd -------------------------------------------------------

TEST_CASE("CUDA nn: conv + batch norm + pooling + linear model, forward and backward", "[cuda]") {
  if (!cuda_ready()) return;
  const DType dt = DType::f32;
  const Tensor x = input({4, 3, 12, 12}, 1, dt), target = input({4, 5}, 2, dt);
  const Tensor w1 = input({8, 3, 3, 3}, 3, dt, -0.3, 0.3), b1 = input({8}, 4, dt, -0.1, 0.1);
  const Tensor gamma = input({8}, 5, dt, 0.5, 1.5), beta = input({8}, 6, dt, -0.1, 0.1);
  const Tensor w2 = input({5, 8 * 3 * 3}, 7, dt, -0.2, 0.2), b2 = input({5}, 8, dt, -0.1, 0.1);
  check_parity("model", {x, target, w1, b1, gamma, beta, w2, b2},
               [](const auto& in) {
                 std::vector<Variable> params;
                 for (std::size_t i = 2; i < in.size(); ++i) params.emplace_back(in[i], true);
                 Variable h = conv2d(Variable(in[0]), params[0], params[1], {1, 1, 1, 1, 1, 1, 1});
                 h = relu(batch_norm_train(h, params[2], params[3], 1e-5));
                 h = avg_pool2d(max_pool2d(h, {2, 2, 2, 2, 0, 0, true}), {3, 3, 2, 2, 1, 1, false});
                 h = adaptive_avg_pool2d(h, 3, 3);
                 const Variable out = linear(flatten(h, 1), params[4], params[5]);
                 Variable loss = mse_loss(out, Variable(in[1]));
                 loss.backward();
                 std::vector<Tensor> results{out.data(), loss.data()};
                 for (const Variable& v : params) results.push_back(v.grad());
                 return results;
               },
               kLibraryF32);
}

}  // namespace dtrain::test
