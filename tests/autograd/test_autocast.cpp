// Autocast (mixed precision): inside a guard, linear, matmul and conv2d multiply operands
// rounded to 16 bits, forward and backward, with f32 results and f32 gradients for the f32
// parameters; outside, nothing changes. On the CPU the expected values are the f32 ops on
// operands rounded by hand, which must match exactly (the same f32 kernels run).
#include "dtrain/autograd/autocast.h"
#include "dtrain/autograd/functions.h"
#include "support/test_support.h"

#include <catch2/catch.hpp>

using namespace dtrain;
using Catch::Matchers::Contains;
using dtrain::test::random_tensor;
using dtrain::test::require_close;

namespace {

Tensor rounded(const Tensor& t, DType half) { return t.to(half).to(DType::f32); }

}  // namespace

TEST_CASE("AutocastGuard nests, turns off and accepts only 16-bit floats", "[autograd][autocast]") {
  CHECK_FALSE(autocast_dtype());
  {
    AutocastGuard outer(DType::bf16);
    CHECK(autocast_dtype() == DType::bf16);
    {
      AutocastGuard inner(DType::f16);
      CHECK(autocast_dtype() == DType::f16);
      AutocastGuard off(DType::f16, /*enabled=*/false);
      CHECK_FALSE(autocast_dtype());
    }
    CHECK(autocast_dtype() == DType::bf16);
  }
  CHECK_FALSE(autocast_dtype());
  REQUIRE_THROWS_WITH(AutocastGuard(DType::f32), Contains("expected f16 or bf16"));
}

// These compare with the exact emulation of bf16 products, whose sums are the reference's;
// test_native_bf16 compares the CPU's bf16 kernels with it.
TEST_CASE("linear under autocast multiplies rounded operands, forward and backward", "[autograd][autocast]") {
  dtrain::test::Bf16ProductsSwitch emulate(Bf16Products::Emulated);
  for (DType half : {DType::bf16, DType::f16}) {
    INFO(dtype_name(half));
    const Tensor xd = random_tensor({6, 10}, 1), wd = random_tensor({4, 10}, 2), bd = random_tensor({4}, 3);
    const Tensor gd = random_tensor({6, 4}, 4);
    Variable x(xd, true), w(wd, true), b(bd, true);
    Variable y;
    {
      AutocastGuard autocast(half);
      y = linear(x, w, b);
    }
    CHECK(y.dtype() == DType::f32);
    require_close(y.data(), add(matmul(rounded(xd, half), rounded(wd, half), false, true), bd), 0, 0);
    // backward runs after the guard is gone: it follows what forward recorded.
    y.backward(gd);
    CHECK(x.grad().dtype() == DType::f32);
    require_close(x.grad(), matmul(rounded(gd, half), rounded(wd, half)), 0, 0);
    require_close(w.grad(), matmul(rounded(gd, half), rounded(xd, half), true, false), 0, 0);
    require_close(b.grad(), sum(gd, {0}), 0, 0);  // the bias gradient is not rounded
    // Rounding happened: the f32 product differs.
    CHECK(max_abs_diff(y.data(), add(matmul(xd, wd, false, true), bd)) > 0);
  }
}

TEST_CASE("matmul and conv2d under autocast; without a guard, f32 as before", "[autograd][autocast]") {
  dtrain::test::Bf16ProductsSwitch emulate(Bf16Products::Emulated);
  const DType half = DType::bf16;
  const Tensor ad = random_tensor({3, 5, 7}, 5), bd = random_tensor({7, 2}, 6);
  Variable a(ad, true), b(bd, true);
  Variable m;
  {
    AutocastGuard autocast(half);
    m = matmul(a, b);
  }
  require_close(m.data(), matmul(rounded(ad, half), rounded(bd, half)), 0, 0);
  const Tensor gm = random_tensor(m.shape(), 7);
  m.backward(gm);
  require_close(a.grad(), matmul(rounded(gm, half), rounded(bd, half), false, true), 0, 0);
  require_close(b.grad(),
                matmul(rounded(ad, half).reshape({-1, 7}), rounded(gm, half).reshape({-1, 2}), true, false), 0, 0);

  const Tensor xd = random_tensor({2, 3, 8, 8}, 8), wd = random_tensor({5, 3, 3, 3}, 9);
  const Conv2dParams p{.pad_h = 1, .pad_w = 1};
  Variable x(xd, true), w(wd, true);
  Variable y;
  {
    AutocastGuard autocast(half);
    y = conv2d(x, w, Variable(), p);
  }
  // Convolution sums are rounded through the 16-bit type too (as cuDNN writes them).
  require_close(y.data(), rounded(conv2d(rounded(xd, half), rounded(wd, half), Tensor(), p), half), 0, 0);
  const Tensor gy = random_tensor(y.shape(), 10);
  y.backward(gy);
  require_close(x.grad(), rounded(conv2d_backward_input(rounded(gy, half), rounded(wd, half), xd.shape(), p), half),
                0, 0);
  require_close(w.grad(), rounded(conv2d_backward_weight(rounded(gy, half), rounded(xd, half), wd.shape(), p), half),
                0, 0);

  Variable plain = conv2d(Variable(xd), Variable(wd), Variable(), p);
  require_close(plain.data(), conv2d(xd, wd, Tensor(), p), 0, 0);
}
