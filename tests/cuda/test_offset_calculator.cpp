// The CUDA kernel's indexing, checked on the host (no GPU needed): for every element of
// out, the calculator's offsets equal those of the operands' own shapes and strides.
#include "support/test_support.h"
#include "tensor/cuda/offset_calculator.h"

#include <vector>

namespace dtrain::detail::gpu {
namespace {

// Offset of out's row-major element `linear` in t (expanded to out's shape), from t's strides.
std::int64_t reference_offset(const Shape& shape, const Tensor& t, std::int64_t linear) {
  std::int64_t off = 0;
  for (std::size_t d = shape.size(); d-- > 0;) {
    off += linear % shape[d] * t.strides()[d];
    linear /= shape[d];
  }
  return off;
}

template <std::size_t N>
void check_offsets(const Tensor& out, const std::array<const Tensor*, N - 1>& inputs) {
  const OffsetCalculator<N> calc = make_offset_calculator<N>(out, inputs);
  std::int64_t off[N];
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    calc.offsets(i, off);
    INFO("element " << i);
    REQUIRE(off[0] == reference_offset(out.shape(), out, i));
    for (std::size_t k = 1; k < N; ++k) REQUIRE(off[k] == reference_offset(out.shape(), *inputs[k - 1], i));
  }
}

}  // namespace

TEST_CASE("CUDA offset calculator: contiguous operands merge into one dim", "[cuda]") {
  const Tensor out = Tensor::empty({4, 5, 6}), a = Tensor::empty({4, 5, 6});
  CHECK(make_offset_calculator<2>(out, {&a}).ndim == 1);
  check_offsets<2>(out, {&a});
}

TEST_CASE("CUDA offset calculator: transposed, sliced and broadcast operands", "[cuda]") {
  const Tensor out = Tensor::empty({6, 7});
  const Tensor transposed = Tensor::empty({7, 6}).t();
  const Tensor sliced = Tensor::empty({6, 22}).slice(1, 1, 22, 3);  // strides (22, 3)
  const Tensor row = Tensor::empty({7}).expand({6, 7});             // stride 0 on dim 0
  check_offsets<4>(out, {&transposed, &sliced, &row});

  const Tensor out3 = Tensor::empty({4, 5, 6});
  const Tensor a = Tensor::empty({4, 1, 6}).expand({4, 5, 6}), b = Tensor::empty({5, 1}).expand({4, 5, 6});
  check_offsets<3>(out3, {&a, &b});
  // A transposed output (as a strided copy_ destination has).
  const Tensor out_t = Tensor::empty({5, 4}).t();
  const Tensor c = Tensor::empty({4, 5});
  check_offsets<2>(out_t, {&c});
}

TEST_CASE("CUDA offset calculator: too many dims after merging is an error", "[cuda]") {
  std::vector<std::int64_t> reversed;
  for (std::int64_t d = 16; d >= 0; --d) reversed.push_back(d);
  const Tensor deep = Tensor::empty(Shape(17, 2)).permute(reversed);  // 17 dims, none mergeable
  const Tensor out = Tensor::empty(Shape(17, 2));
  CHECK_THROWS_WITH(make_offset_calculator<2>(out, {&deep}), Catch::Contains("up to 16 dims after merging, got 17"));
}

}  // namespace dtrain::detail::gpu
