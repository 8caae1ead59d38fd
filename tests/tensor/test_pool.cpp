// Pooling against direct loops in double: max (values and plane indices, padding never
// wins), average (with and without counting the padding), adaptive average (PyTorch's
// windows), and each backward.
#include "support/test_support.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dtrain {
namespace {

Pool2dParams pool(std::int64_t k, std::int64_t s, std::int64_t pad, bool include_pad = true) {
  return {k, k, s, s, pad, pad, include_pad};
}

// One window per output position: its input rows [h0, h1), columns [w0, w1), divisor.
struct Win {
  std::int64_t h0, h1, w0, w1, divisor;
};

// Windows of a strided pooling, straight from PyTorch's definition.
std::vector<Win> pool_windows(std::int64_t h, std::int64_t w, const Pool2dParams& p, std::int64_t& oh,
                              std::int64_t& ow) {
  oh = (h + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1;
  ow = (w + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1;
  std::vector<Win> out;
  for (std::int64_t y = 0; y < oh; ++y)
    for (std::int64_t x = 0; x < ow; ++x) {
      std::int64_t h0 = y * p.stride_h - p.pad_h, w0 = x * p.stride_w - p.pad_w;
      std::int64_t h1 = std::min(h0 + p.kernel_h, h + p.pad_h), w1 = std::min(w0 + p.kernel_w, w + p.pad_w);
      std::int64_t padded = (h1 - h0) * (w1 - w0);
      h0 = std::max<std::int64_t>(h0, 0), w0 = std::max<std::int64_t>(w0, 0);
      h1 = std::min(h1, h), w1 = std::min(w1, w);
      out.push_back({h0, h1, w0, w1, p.count_include_pad ? padded : (h1 - h0) * (w1 - w0)});
    }
  return out;
}

std::vector<Win> adaptive_windows(std::int64_t h, std::int64_t w, std::int64_t oh, std::int64_t ow) {
  std::vector<Win> out;
  for (std::int64_t y = 0; y < oh; ++y)
    for (std::int64_t x = 0; x < ow; ++x) {
      std::int64_t h0 = (y * h) / oh, h1 = ((y + 1) * h + oh - 1) / oh;
      std::int64_t w0 = (x * w) / ow, w1 = ((x + 1) * w + ow - 1) / ow;
      out.push_back({h0, h1, w0, w1, (h1 - h0) * (w1 - w0)});
    }
  return out;
}

// Average over windows for every plane of x (N, C, H, W).
Tensor naive_average(const Tensor& x, const std::vector<Win>& wins, std::int64_t oh, std::int64_t ow) {
  const std::int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
  std::vector<double> xv = x.to_vector<double>(), out;
  for (std::int64_t p = 0; p < planes; ++p)
    for (const Win& win : wins) {
      double s = 0;
      for (std::int64_t i = win.h0; i < win.h1; ++i)
        for (std::int64_t j = win.w0; j < win.w1; ++j) s += xv[(p * h + i) * w + j];
      out.push_back(s / static_cast<double>(win.divisor));
    }
  return Tensor::from_vector(out, {x.size(0), x.size(1), oh, ow});
}

Tensor naive_average_backward(const Tensor& go, const Shape& x_shape, const std::vector<Win>& wins) {
  const std::int64_t planes = x_shape[0] * x_shape[1], h = x_shape[2], w = x_shape[3];
  std::vector<double> gv = go.to_vector<double>(), gx(shape_numel(x_shape), 0.0);
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::size_t o = 0; o < wins.size(); ++o) {
      const Win& win = wins[o];
      for (std::int64_t i = win.h0; i < win.h1; ++i)
        for (std::int64_t j = win.w0; j < win.w1; ++j)
          gx[(p * h + i) * w + j] += gv[p * wins.size() + o] / static_cast<double>(win.divisor);
    }
  return Tensor::from_vector(gx, x_shape);
}

}  // namespace

TEST_CASE("max_pool2d values and indices match the direct loops", "[cpu][tensor]") {
  for (const Pool2dParams& p : {pool(2, 2, 0), pool(3, 2, 1), pool(3, 1, 1)}) {
    Tensor x = test::random_tensor({2, 3, 7, 6}, 10);
    std::int64_t oh = 0, ow = 0;
    std::vector<Win> wins = pool_windows(7, 6, p, oh, ow);
    std::vector<double> xv = x.to_vector<double>(), vals;
    std::vector<std::int64_t> idx;
    for (std::int64_t plane = 0; plane < 6; ++plane)
      for (const Win& win : wins) {
        double best = -std::numeric_limits<double>::infinity();
        std::int64_t arg = -1;
        for (std::int64_t i = win.h0; i < win.h1; ++i)
          for (std::int64_t j = win.w0; j < win.w1; ++j)
            if (xv[plane * 42 + i * 6 + j] > best) {
              best = xv[plane * 42 + i * 6 + j];
              arg = i * 6 + j;
            }
        vals.push_back(best);
        idx.push_back(arg);
      }
    MaxPoolResult r = max_pool2d(x, p);
    test::require_close(r.output, Tensor::from_vector(vals, {2, 3, oh, ow}), 0, 0);
    CHECK(r.indices.dtype() == DType::i64);
    CHECK(r.indices.to_vector<std::int64_t>() == idx);

    Tensor go = test::random_tensor({2, 3, oh, ow}, 11);
    std::vector<double> gv = go.to_vector<double>(), gx(2 * 3 * 7 * 6, 0.0);
    for (std::size_t o = 0; o < idx.size(); ++o) gx[(o / wins.size()) * 42 + idx[o]] += gv[o];
    test::require_close(max_pool2d_backward(go, r.indices, x.shape()), Tensor::from_vector(gx, x.shape()), 1e-6, 1e-6);
  }
}

TEST_CASE("max_pool2d_backward overwrites every element of reused memory", "[cpu][tensor]") {
  // grad_x is allocated uninitialized: blocks of its size freed full of NaN right before
  // are what the block cache (off under ASan) serves it from (its plain storage and, in the
  // blocked layout, the blocked buffer), and every element must come out as the scatter of
  // the output gradient into zeros.
  const bool blocked = GENERATE(false, true);
  test::CpuLayoutSwitch layout(blocked);
  INFO((blocked ? "blocked layout" : "plain layout"));
  const Pool2dParams p = pool(2, 2, 0);
  const auto held_blocked = [](const Tensor& t) { return t.storage()->layout() != nullptr; };
  // Convolution outputs with whole channel blocks, so that the blocked kernels run.
  const auto conv_out = [](std::uint64_t seed) {
    return conv2d(test::random_tensor({2, 8, 6, 6}, seed), test::random_tensor({16, 8, 1, 1}, seed + 1), Tensor(),
                  Conv2dParams{});
  };
  const Tensor x = conv_out(12);
  const MaxPoolResult r = max_pool2d(x, p);
  const Tensor g = max_pool2d(conv_out(14), p).output;
  // The same values read through another tensor: reading g would make it plain for good.
  const std::vector<double> gv = max_pool2d(conv_out(14), p).output.to_vector<double>();
  const std::vector<std::int64_t> idx = r.indices.to_vector<std::int64_t>();
  std::vector<double> expected(static_cast<std::size_t>(x.numel()), 0.0);
  for (std::size_t o = 0; o < idx.size(); ++o) expected[(o / 9) * 36 + static_cast<std::size_t>(idx[o])] += gv[o];
  const Tensor reference = Tensor::from_vector(expected, x.shape());
  if (blocked && !held_blocked(g)) {
    test::skip_test_case(
        "oneDNN picks no blocked layout for these convolutions on this CPU: the blocked kernel "
        "is not checked");
    return;
  }
  {
    const Tensor nan_a = Tensor::full(x.shape(), std::nan("")), nan_b = Tensor::full(x.shape(), std::nan(""));
  }
  const Tensor gx = max_pool2d_backward(g, r.indices, x.shape());
  CHECK(held_blocked(gx) == blocked);
  test::require_close(gx, reference, 0, 0);
}

TEST_CASE("max_pool2d padding never wins over negative inputs", "[cpu][tensor]") {
  Tensor x = Tensor::full({1, 1, 3, 3}, -5.0);
  MaxPoolResult r = max_pool2d(x, pool(3, 1, 1));
  test::require_close(r.output, Tensor::full({1, 1, 3, 3}, -5.0), 0, 0);
  for (std::int64_t i : r.indices.to_vector<std::int64_t>()) CHECK((i >= 0 && i < 9));
}

TEST_CASE("avg_pool2d with and without counting the padding", "[cpu][tensor]") {
  Tensor x = test::random_tensor({2, 2, 7, 8}, 20, DType::f64);
  for (bool include_pad : {true, false}) {
    for (const Pool2dParams& p : {pool(2, 2, 0, include_pad), pool(3, 2, 1, include_pad), pool(3, 3, 1, include_pad)}) {
      INFO("include_pad " << include_pad << " kernel " << p.kernel_h << " stride " << p.stride_h);
      std::int64_t oh = 0, ow = 0;
      std::vector<Win> wins = pool_windows(7, 8, p, oh, ow);
      test::require_close(avg_pool2d(x, p), naive_average(x, wins, oh, ow), 1e-12, 1e-12);
      Tensor go = test::random_tensor({2, 2, oh, ow}, 21, DType::f64);
      test::require_close(avg_pool2d_backward(go, x.shape(), p), naive_average_backward(go, x.shape(), wins), 1e-12,
                          1e-12);
    }
  }
}

TEST_CASE("adaptive_avg_pool2d uses PyTorch's variable windows", "[cpu][tensor]") {
  Tensor x = test::random_tensor({2, 3, 7, 5}, 30, DType::f64);
  for (auto [oh, ow] : {std::pair<std::int64_t, std::int64_t>{3, 2}, {1, 1}, {7, 5}, {4, 3}, {9, 6}}) {
    INFO("output " << oh << "x" << ow);
    std::vector<Win> wins = adaptive_windows(7, 5, oh, ow);
    test::require_close(adaptive_avg_pool2d(x, oh, ow), naive_average(x, wins, oh, ow), 1e-12, 1e-12);
    Tensor go = test::random_tensor({2, 3, oh, ow}, 31, DType::f64);
    test::require_close(adaptive_avg_pool2d_backward(go, x.shape()), naive_average_backward(go, x.shape(), wins), 1e-12,
                        1e-12);
  }
}

TEST_CASE("pooling argument errors name the op and the shapes", "[cpu][tensor]") {
  Tensor x = Tensor::zeros({1, 1, 3, 3});
  REQUIRE_THROWS_WITH(max_pool2d(x, pool(5, 1, 0)), Catch::Contains("max_pool2d") && Catch::Contains("[1, 1, 3, 3]"));
  REQUIRE_THROWS_WITH(avg_pool2d(x, pool(2, 1, 2)), Catch::Contains("avg_pool2d") && Catch::Contains("half"));
  REQUIRE_THROWS_WITH(max_pool2d(Tensor::zeros({3, 3}), pool(2, 2, 0)), Catch::Contains("4-D"));
  REQUIRE_THROWS_WITH(adaptive_avg_pool2d(x, 0, 1), Catch::Contains("adaptive_avg_pool2d"));
  REQUIRE_THROWS_WITH(avg_pool2d_backward(Tensor::zeros({1, 1, 2, 2}), x.shape(), pool(2, 2, 0)),
                      Catch::Contains("grad_out") && Catch::Contains("[1, 1, 1, 1]"));
}

}  // namespace dtrain
