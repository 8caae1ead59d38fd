// Tensors of 16-bit floats: they convert element by element exactly as Half/BFloat16 do,
// fill, print, and reach matmul and conv2d as operands with f32 results; every other op
// refuses them with a message that says what to do.
#include "support/test_support.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace dtrain;
using Catch::Matchers::Contains;
using dtrain::test::random_tensor;
using dtrain::test::require_close;

namespace {

// x rounded to the 16-bit type and back, element by element through half.h.
Tensor rounded(const Tensor& x, DType half) {
  std::vector<float> v = x.to_vector<float>();
  for (float& f : v) f = half == DType::bf16 ? static_cast<float>(BFloat16(f)) : static_cast<float>(Half(f));
  return Tensor::from_vector(v, x.shape());
}

}  // namespace

TEST_CASE("16-bit tensors convert as their element types do", "[tensor][half]") {
  for (DType half : {DType::f16, DType::bf16}) {
    INFO(dtype_name(half));
    const Tensor x = random_tensor({7, 33}, 1, DType::f32, -300, 300);
    const Tensor h = x.to(half);
    CHECK(h.dtype() == half);
    CHECK(h.nbytes() == static_cast<std::size_t>(x.numel()) * 2);
    require_close(h.to(DType::f32), rounded(x, half), 0, 0);
    // Strided copies, and through f64 and integers.
    require_close(x.t().to(half).to(DType::f32), rounded(x, half).t().contiguous(), 0, 0);
    require_close(h.to(DType::f64).to(DType::f32), rounded(x, half), 0, 0);
    CHECK(Tensor::full({3}, -2.5, {half}).to_vector<float>() == std::vector<float>{-2.5f, -2.5f, -2.5f});
    CHECK(Tensor::arange(0, 4, 1, {half}).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3});
    CHECK_THAT(h.narrow(0, 0, 1).narrow(1, 0, 2).str(), Contains(dtype_name(half)));
  }
  // Out of f16's range: infinity; bf16 keeps the range of f32.
  CHECK(std::isinf(Tensor::full({1}, 70000.0).to(DType::f16).item()));
  CHECK(Tensor::full({1}, 70000.0).to(DType::bf16).item() == 70144.0);
}

TEST_CASE("matmul and conv2d take 16-bit operands and return f32 sums", "[tensor][half]") {
  // conv2d's sums are rounded through the 16-bit type (as cuDNN writes them), its bias added after.
  // The emulation, whose sums are exactly these; test_native_bf16 compares the bf16 kernels with it.
  dtrain::test::Bf16ProductsSwitch emulate(Bf16Products::Emulated);
  for (DType half : {DType::f16, DType::bf16}) {
    INFO(dtype_name(half));
    const Tensor a = random_tensor({5, 40}, 2), b = random_tensor({40, 6}, 3);
    const Tensor out = matmul(a.to(half), b.to(half));
    CHECK(out.dtype() == DType::f32);
    // The products of the rounded operands, summed in f32: what a tensor-core GEMM gives.
    require_close(out, matmul(rounded(a, half), rounded(b, half)), 0, 0);
    require_close(matmul(a.to(half), b.to(half).t(), false, true), matmul(rounded(a, half), rounded(b, half)), 0, 0);

    const Tensor x = random_tensor({2, 3, 9, 9}, 4), w = random_tensor({4, 3, 3, 3}, 5), bias = random_tensor({4}, 6);
    const Conv2dParams p{.stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 1};
    const Tensor y = conv2d(x.to(half), w.to(half), bias, p);
    CHECK(y.dtype() == DType::f32);
    require_close(y, add(rounded(conv2d(rounded(x, half), rounded(w, half), Tensor(), p), half),
                         bias.reshape({1, 4, 1, 1})), 0, 0);
    const Tensor g = random_tensor(y.shape(), 7);
    require_close(conv2d_backward_input(g.to(half), w.to(half), x.shape(), p),
                  rounded(conv2d_backward_input(rounded(g, half), rounded(w, half), x.shape(), p), half), 0, 0);
    require_close(conv2d_backward_weight(g.to(half), x.to(half), w.shape(), p),
                  rounded(conv2d_backward_weight(rounded(g, half), rounded(x, half), w.shape(), p), half), 0, 0);
    REQUIRE_THROWS_WITH(conv2d(x.to(half), w.to(half), bias.to(half), p), Contains("expected f32"));
  }
  // An f16 convolution whose sums pass 65504 overflows to inf, as on a GPU.
  const Tensor big = conv2d(Tensor::full({1, 2, 3, 3}, 200.0).to(DType::f16), Tensor::full({1, 2, 3, 3}, 100.0).to(DType::f16),
                            Tensor(), {});
  CHECK(std::isinf(big.item()));
  REQUIRE_THROWS_WITH(matmul(Tensor::zeros({2, 2}, {DType::f16}), Tensor::zeros({2, 2}, {DType::bf16})),
                      Contains("different dtypes"));
}

TEST_CASE("other ops refuse 16-bit tensors and say to convert", "[tensor][half]") {
  const Tensor h = Tensor::ones({4}, {DType::bf16});
  REQUIRE_THROWS_WITH(add(h, h), Contains("bf16") && Contains("convert with .to(DType::f32)"));
  REQUIRE_THROWS_WITH(sum(h), Contains("bf16") && Contains("convert with .to(DType::f32)"));
  REQUIRE_THROWS_WITH(relu(Tensor::ones({4}, {DType::f16})), Contains("f16"));
}
