// Activations held in oneDNN's blocked layout between CPU kernels (StorageLayout,
// src/tensor/cpu/blocked_layout.h): a convolution's f32 output stays blocked through the
// kernels that read that layout, anything else reads the plain values, a write through the
// plain bytes drops the blocked copy. Whole networks: tests/layers/test_blocked_training.cpp.
#include "support/test_support.h"

#include <cmath>
#include <vector>


namespace dtrain {
namespace {

using test::random_tensor;
using test::require_close;

bool held_blocked(const Tensor& t) { return t.storage()->layout() != nullptr; }

// Whether `t`, a convolution's output, is held blocked; if not, oneDNN picks no blocked
// layout on this CPU, and the test case is skipped (it would check nothing).
bool blocked_or_skip(const Tensor& t) {
  if (held_blocked(t)) return true;
  test::skip_test_case("oneDNN picks no blocked layout for this convolution on this CPU: nothing to check");
  return false;
}

// 16 output channels fill whole blocks of 8 and of 16.
Tensor conv_out(std::uint64_t seed) {
  return conv2d(random_tensor({3, 8, 6, 5}, seed), random_tensor({16, 8, 3, 3}, seed + 1), Tensor(),
                Conv2dParams{1, 1, 1, 1, 1, 1, 1});
}

TEST_CASE("a convolution's f32 output is held blocked and reads as its plain values", "[blocked]") {
  test::CpuLayoutSwitch on(true);
  Tensor blocked = conv_out(1);
  if (!blocked_or_skip(blocked)) return;
  set_cpu_blocked_layout(false);
  const Tensor plain = conv_out(1);
  CHECK_FALSE(held_blocked(plain));
  // The same primitive computes both; the reorder to plain is exact.
  CHECK(blocked.to_vector<float>() == plain.to_vector<float>());
  CHECK_FALSE(held_blocked(blocked));  // read once: plain from then on
}

TEST_CASE("element-wise ops on equal blocked layouts stay blocked and match the plain result", "[blocked]") {
  test::CpuLayoutSwitch on(true);
  const Tensor a = conv_out(3), b = conv_out(5);
  if (!blocked_or_skip(a)) return;
  const Tensor r = relu(a), s = add(a, b), m = mul(a, b), sr = add_relu(a, b);
  CHECK(held_blocked(r));
  CHECK(held_blocked(s));
  CHECK(held_blocked(sr));
  require_close(sr, relu(add(a.clone(), b.clone())), 0, 0);
  // A scalar operand or a plain one takes the plain path, and still computes right.
  const Tensor plain_b = b.clone();
  const Tensor mixed = add(a, plain_b);
  CHECK_FALSE(held_blocked(mixed));
  require_close(r, relu(a.clone()), 0, 0);
  require_close(s, add(a.clone(), b.clone()), 0, 0);
  require_close(m, mul(a.clone(), b.clone()), 0, 0);
  require_close(mixed, add(a.clone(), b.clone()), 0, 0);
  require_close(mul(conv_out(3), 2.0), mul(a.clone(), 2.0), 0, 0);
}

TEST_CASE("ops that do not know the layout see plain values: views, reductions, copies", "[blocked]") {
  test::CpuLayoutSwitch on(true);
  const Tensor reference = [] {
    test::CpuLayoutSwitch off(false);
    return conv_out(7);
  }();
  if (!blocked_or_skip(conv_out(7))) return;
  require_close(conv_out(7).slice(1, 2, 9), reference.slice(1, 2, 9), 0, 0);
  require_close(sum(conv_out(7), {0, 2, 3}), sum(reference, {0, 2, 3}), 0, 0);
  require_close(conv_out(7).reshape({3, -1}), reference.reshape({3, -1}), 0, 0);
  require_close(conv_out(7).to(DType::f64), reference.to(DType::f64), 0, 0);
  CHECK(conv_out(7).str() == reference.str());
}

TEST_CASE("per-channel sums (a convolution's bias gradient) read a blocked tensor as it is", "[blocked]") {
  test::CpuLayoutSwitch on(true);
  const Tensor x = conv_out(11);
  if (!blocked_or_skip(x)) return;
  const Tensor sums = sum(x, {0, 2, 3}), kept = sum(x, {0, 2, 3}, true);
  CHECK(held_blocked(x));
  CHECK(sums.shape() == Shape{16});
  CHECK(kept.shape() == Shape{1, 16, 1, 1});
  const Tensor plain = x.clone();
  require_close(sums, sum(plain, {0, 2, 3}), 1e-6, 1e-6);
  require_close(kept, sum(plain, {0, 2, 3}, true), 1e-6, 1e-6);
  // Other reductions still see the plain values.
  require_close(sum(x, {1}), sum(plain, {1}), 1e-6, 1e-6);
}

TEST_CASE("a write through the plain bytes drops the blocked copy", "[blocked]") {
  test::CpuLayoutSwitch on(true);
  Tensor t = conv_out(9);
  if (!blocked_or_skip(t)) return;
  t.fill_(-2);
  CHECK_FALSE(held_blocked(t));
  require_close(relu(t), Tensor::zeros(t.shape()), 0, 0);
  // An in-place binary op into a blocked tensor lands in that tensor.
  Tensor u = conv_out(9);
  const Tensor expected = mul(u.clone(), 2.0);
  binary_out(BinaryOp::Add, u, u, u);
  require_close(u, expected, 1e-6, 0);
}

TEST_CASE("batch norm on blocked activations matches the plain kernel, forward and backward", "[blocked]") {
  test::CpuLayoutSwitch restore(true);
  const bool relu = GENERATE(false, true);
  INFO("ReLU fused: " << relu);
  for (const std::int64_t size : {1, 2, 5}) {
    INFO("spatial size " << size);
    // conv2d's output, blocked or plain as the switch says.
    const auto make = [size](std::uint64_t seed, bool blocked) {
      set_cpu_blocked_layout(blocked);
      return conv2d(random_tensor({2, 8, size, size}, seed), random_tensor({16, 8, 1, 1}, seed + 1), Tensor(),
                    Conv2dParams{});
    };
    const Tensor gamma = random_tensor({16}, 25), beta = random_tensor({16}, 26);
    const Tensor x = make(21, true), g = make(23, true);
    if (!blocked_or_skip(x)) return;
    const BatchNormResult blocked = batch_norm_forward(x, gamma, beta, 1e-5, relu);
    const Tensor mask = relu ? blocked.y : Tensor();
    const BatchNormGrads gb = batch_norm_backward(g, x, blocked.mean, blocked.var, gamma, 1e-5, mask);
    CHECK(held_blocked(blocked.y));
    CHECK(held_blocked(gb.x));
    const Tensor xp = make(21, false), gp_in = make(23, false);
    const BatchNormResult plain = batch_norm_forward(xp, gamma, beta, 1e-5, relu);
    const BatchNormGrads gp =
        batch_norm_backward(gp_in, xp, plain.mean, plain.var, gamma, 1e-5, relu ? plain.y : Tensor());
    require_close(blocked.y, plain.y, 1e-4, 1e-5);
    require_close(blocked.mean, plain.mean, 1e-5, 1e-6);
    require_close(blocked.var, plain.var, 1e-5, 1e-6);
    require_close(gb.x, gp.x, 1e-4, 1e-5);
    require_close(gb.gamma, gp.gamma, 1e-4, 1e-5);
    require_close(gb.beta, gp.beta, 1e-4, 1e-5);
    if (!relu) continue;
    // A ReLU output made plain (something read its bytes) while the gradient and the input
    // are still blocked: the plain kernel then, with the same result.
    const Tensor plain_mask = make(21, true);  // blocked values equal to x's
    const BatchNormResult again = batch_norm_forward(plain_mask, gamma, beta, 1e-5, true);
    (void)again.y.data<float>();  // makes it plain for good
    REQUIRE_FALSE(held_blocked(again.y));
    const BatchNormGrads mixed = batch_norm_backward(make(23, true), plain_mask, again.mean, again.var, gamma, 1e-5,
                                                     again.y);
    require_close(mixed.x, gp.x, 1e-4, 1e-5);
    require_close(mixed.gamma, gp.gamma, 1e-4, 1e-5);
  }
}

TEST_CASE("GEMM weight gradients leave blocked operands blocked", "[blocked]") {
  // The input of a convolution after a fused batch norm is that batch norm's ReLU mask:
  // reading it for the weight gradient must not make it plain.
  test::CpuLayoutSwitch restore(true);
  test::ConvWeightGradSwitch gemm(ConvWeightGrad::Gemm);
  const Tensor x = conv_out(31), w = random_tensor({16, 16, 3, 3}, 33);  // outputs fill 8- and 16-blocks
  if (!blocked_or_skip(x)) return;
  const Conv2dParams p{1, 1, 1, 1, 1, 1, 1};
  const Tensor g = conv2d(x, w, Tensor(), p);  // blocked too: an output gradient's shape
  REQUIRE(held_blocked(g));
  const Tensor gw = conv2d_backward_weight(g, x, w.shape(), p);
  CHECK(held_blocked(x));
  CHECK(held_blocked(g));
  test::ConvWeightGradSwitch direct(ConvWeightGrad::Direct);
  require_close(gw, conv2d_backward_weight(g, x, w.shape(), p), 1e-4, 1e-4);
}

TEST_CASE("max pooling keeps blocked activations blocked and matches the plain kernel", "[blocked]") {
  test::CpuLayoutSwitch on(true);
  for (const Pool2dParams& p : {Pool2dParams{2, 2, 2, 2, 0, 0}, Pool2dParams{3, 3, 2, 2, 1, 1},
                                Pool2dParams{3, 3, 1, 1, 1, 1}, Pool2dParams{2, 3, 1, 2, 0, 1}}) {
    INFO("kernel " << p.kernel_h << "x" << p.kernel_w << ", stride " << p.stride_h << "x" << p.stride_w);
    const Tensor x = conv_out(41);
    if (!blocked_or_skip(x)) return;
    const MaxPoolResult blocked = max_pool2d(x, p);
    CHECK(held_blocked(blocked.output));
    CHECK(held_blocked(x));
    const MaxPoolResult plain = max_pool2d(x.clone(), p);
    CHECK_FALSE(held_blocked(plain.output));
    require_close(blocked.output, plain.output, 0, 0);
    CHECK(blocked.indices.to_vector<std::int64_t>() == plain.indices.to_vector<std::int64_t>());

    // A blocked output gradient (a pooled convolution output has its shape) scatters into a
    // blocked grad_x; the same values through the plain kernel.
    const Tensor g = max_pool2d(conv_out(43), p).output;
    REQUIRE(held_blocked(g));
    const Tensor gx = max_pool2d_backward(g, blocked.indices, x.shape());
    CHECK(held_blocked(gx));
    const Tensor gx_plain = max_pool2d_backward(g.clone(), blocked.indices, x.shape());
    CHECK_FALSE(held_blocked(gx_plain));
    require_close(gx, gx_plain, 0, 0);
  }
}

TEST_CASE("blocked max pooling lets the first NaN of a window win, with its index", "[blocked]") {
  test::CpuLayoutSwitch on(true);
  // A 1x1 convolution spreads a NaN at (image 1, row 2, column 3) over every output channel.
  Tensor in = random_tensor({2, 8, 6, 5}, 45);
  std::vector<float> values = in.to_vector<float>();
  values[((1 * 8 + 4) * 6 + 2) * 5 + 3] = std::nanf("");
  in = Tensor::from_vector(values, in.shape());
  const Tensor x = conv2d(in, random_tensor({16, 8, 1, 1}, 46), Tensor(), Conv2dParams{});
  if (!blocked_or_skip(x)) return;
  const MaxPoolResult blocked = max_pool2d(x, Pool2dParams{3, 3, 1, 1, 1, 1});
  const MaxPoolResult plain = max_pool2d(x.clone(), Pool2dParams{3, 3, 1, 1, 1, 1});
  REQUIRE(held_blocked(blocked.output));
  const std::vector<float> out = blocked.output.to_vector<float>(), expected = plain.output.to_vector<float>();
  std::int64_t nans = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    CHECK(std::isnan(out[i]) == std::isnan(expected[i]));
    if (std::isnan(out[i])) ++nans;
    else CHECK(out[i] == expected[i]);
  }
  CHECK(nans == 16 * 9);  // the 3x3 outputs around (2, 3) in each channel of image 1
  CHECK(blocked.indices.to_vector<std::int64_t>() == plain.indices.to_vector<std::int64_t>());
}

}  // namespace
}  // namespace dtrain
