// conv2d and its two backwards against direct loops in double, over a table of geometries
// (stride, padding, dilation, groups, depthwise, 1x1), plus the adjoint identities that tie
// the three together.
#include "support/test_support.h"

#include "dtrain/core/parallel.h"

#include <cmath>
#include <vector>

namespace dtrain {
namespace {

struct ConvCase {
  const char* name;
  Shape x, w;
  Conv2dParams p;
};

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {"3x3", {2, 3, 7, 6}, {4, 3, 3, 3}, {}},
      {"stride 2, padding 1", {2, 3, 9, 8}, {5, 3, 3, 3}, {2, 2, 1, 1, 1, 1, 1}},
      {"dilation 2", {1, 2, 9, 9}, {3, 2, 3, 3}, {1, 1, 2, 2, 2, 2, 1}},
      {"groups 2", {3, 4, 6, 6}, {6, 2, 3, 3}, {1, 1, 1, 1, 1, 1, 2}},
      {"depthwise, stride 2", {2, 4, 7, 7}, {4, 1, 3, 3}, {2, 2, 1, 1, 1, 1, 4}},
      {"1x1", {3, 5, 4, 5}, {7, 5, 1, 1}, {}},
      {"1x1 stride 2", {2, 5, 5, 5}, {3, 5, 1, 1}, {2, 2, 0, 0, 1, 1, 1}},
      {"2x3, mixed stride and padding", {2, 3, 8, 7}, {4, 3, 2, 3}, {2, 1, 0, 1, 1, 1, 1}},
      {"padding wider than the input", {1, 1, 2, 2}, {2, 1, 3, 3}, {1, 1, 2, 2, 1, 1, 1}},
      // 72 columns-matrix rows: split 2 or 3 ways by the GEMM weight gradients, whose
      // products here take all 5 images' 16 positions side by side.
      {"3x3, 8 channels, 4x4 maps", {5, 8, 4, 4}, {6, 8, 3, 3}, {1, 1, 1, 1, 1, 1, 1}},
      {"groups 2, 1x1, 40 channels", {3, 40, 3, 3}, {4, 20, 1, 1}, {1, 1, 0, 0, 1, 1, 2}},
      // Three whole blocks of 16 output channels: 2 or 3 threads reorder the weights for
      // oneDNN a range of blocks each.
      {"3x3, 16 -> 48 channels", {2, 16, 6, 6}, {48, 16, 3, 3}, {1, 1, 1, 1, 1, 1, 1}},
      // Whole 16x16 blocks of 1x1 weights (ResNet's bottlenecks): their reorders between
      // oneDNN's layout and the plain one run on the weights described as 2-D matrices.
      {"1x1, 32 -> 48 channels", {2, 32, 5, 5}, {48, 32, 1, 1}, {}},
      {"1x1 stride 2, 48 -> 32 channels", {3, 48, 6, 6}, {32, 48, 1, 1}, {2, 2, 0, 0, 1, 1, 1}},
      // Activations of 1x1 images, reordered as 2-D too: a padded channel block (20 and
      // 24 channels) out of a stride-2 1x1 convolution, and whole blocks into one.
      {"1x1 stride 2 to a 1x1 map, 20 -> 24 channels", {2, 20, 2, 2}, {24, 20, 1, 1}, {2, 2, 0, 0, 1, 1, 1}},
      {"1x1 maps, 32 -> 16 channels", {2, 32, 1, 1}, {16, 32, 1, 1}, {}},
  };
  return cases;
}

// Loops over every (n, o, oh, ow, c, kh, kw) term of the convolution, calling
// term(x index, weight index, output index).
template <class Term>
void for_each_term(const Shape& x, const Shape& w, const Conv2dParams& p, Term term) {
  const std::int64_t cg = x[1] / p.groups, og = w[0] / p.groups;
  const std::int64_t oh = (x[2] + 2 * p.pad_h - p.dilation_h * (w[2] - 1) - 1) / p.stride_h + 1;
  const std::int64_t ow = (x[3] + 2 * p.pad_w - p.dilation_w * (w[3] - 1) - 1) / p.stride_w + 1;
  for (std::int64_t n = 0; n < x[0]; ++n)
    for (std::int64_t o = 0; o < w[0]; ++o)
      for (std::int64_t y = 0; y < oh; ++y)
        for (std::int64_t z = 0; z < ow; ++z)
          for (std::int64_t c = 0; c < cg; ++c)
            for (std::int64_t i = 0; i < w[2]; ++i)
              for (std::int64_t j = 0; j < w[3]; ++j) {
                const std::int64_t ih = y * p.stride_h - p.pad_h + i * p.dilation_h;
                const std::int64_t iw = z * p.stride_w - p.pad_w + j * p.dilation_w;
                if (ih < 0 || ih >= x[2] || iw < 0 || iw >= x[3]) continue;
                const std::int64_t ci = (o / og) * cg + c;
                term(((n * x[1] + ci) * x[2] + ih) * x[3] + iw, ((o * cg + c) * w[2] + i) * w[3] + j,
                     ((n * w[0] + o) * oh + y) * ow + z);
              }
}

Shape out_shape(const ConvCase& c) {
  return {c.x[0], c.w[0], (c.x[2] + 2 * c.p.pad_h - c.p.dilation_h * (c.w[2] - 1) - 1) / c.p.stride_h + 1,
          (c.x[3] + 2 * c.p.pad_w - c.p.dilation_w * (c.w[3] - 1) - 1) / c.p.stride_w + 1};
}

Tensor naive_conv(const ConvCase& c, const Tensor& x, const Tensor& w, const Tensor& bias) {
  Shape os = out_shape(c);
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), out(shape_numel(os), 0.0);
  if (bias.defined()) {
    std::vector<double> bv = bias.to_vector<double>();
    const std::int64_t plane = os[2] * os[3];
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = bv[(i / plane) % os[1]];
  }
  for_each_term(c.x, c.w, c.p, [&](std::int64_t xi, std::int64_t wi, std::int64_t oi) { out[oi] += xv[xi] * wv[wi]; });
  return Tensor::from_vector(out, os);
}

Tensor naive_grad_input(const ConvCase& c, const Tensor& go, const Tensor& w) {
  std::vector<double> gv = go.to_vector<double>(), wv = w.to_vector<double>(), gx(shape_numel(c.x), 0.0);
  for_each_term(c.x, c.w, c.p, [&](std::int64_t xi, std::int64_t wi, std::int64_t oi) { gx[xi] += wv[wi] * gv[oi]; });
  return Tensor::from_vector(gx, c.x);
}

Tensor naive_grad_weight(const ConvCase& c, const Tensor& go, const Tensor& x) {
  std::vector<double> gv = go.to_vector<double>(), xv = x.to_vector<double>(), gw(shape_numel(c.w), 0.0);
  for_each_term(c.x, c.w, c.p, [&](std::int64_t xi, std::int64_t wi, std::int64_t oi) { gw[wi] += xv[xi] * gv[oi]; });
  return Tensor::from_vector(gw, c.w);
}

double dot(const Tensor& a, const Tensor& b) {
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  double s = 0;
  for (std::size_t i = 0; i < av.size(); ++i) s += av[i] * bv[i];
  return s;
}

struct ThreadCount {
  int saved = num_threads();
  explicit ThreadCount(int n) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(saved); }
};

}  // namespace

TEST_CASE("conv2d forward matches the direct loops", "[cpu][tensor]") {
  std::uint64_t seed = 100;
  for (const ConvCase& c : conv_cases()) {
    INFO(c.name);
    Tensor x = test::random_tensor(c.x, ++seed), w = test::random_tensor(c.w, ++seed);
    Tensor bias = test::random_tensor({c.w[0]}, ++seed);
    test::require_close(conv2d(x, w, Tensor(), c.p), naive_conv(c, x, w, Tensor()), 1e-5, 1e-5);
    test::require_close(conv2d(x, w, bias, c.p), naive_conv(c, x, w, bias), 1e-5, 1e-5);
  }
}

TEST_CASE("conv2d backward input and weight match the direct loops", "[cpu][tensor]") {
  const ConvWeightGrad mode = GENERATE(ConvWeightGrad::Direct, ConvWeightGrad::Gemm);
  INFO("weight gradients " << (mode == ConvWeightGrad::Gemm ? "by GEMM" : "direct"));
  test::ConvWeightGradSwitch use(mode);
  const int threads = GENERATE(1, 2, 3);  // the batch and the weight gradients' columns split 1-3 ways
  INFO(threads << " thread(s)");
  ThreadCount use_threads(threads);
  std::uint64_t seed = 200;
  for (const ConvCase& c : conv_cases()) {
    INFO(c.name);
    Tensor x = test::random_tensor(c.x, ++seed), w = test::random_tensor(c.w, ++seed);
    Tensor go = test::random_tensor(out_shape(c), ++seed);
    test::require_close(conv2d_backward_input(go, w, c.x, c.p), naive_grad_input(c, go, w), 1e-5, 1e-5);
    test::require_close(conv2d_backward_weight(go, x, c.w, c.p), naive_grad_weight(c, go, x), 1e-5, 1e-5);
  }
}

TEST_CASE("conv2d backwards are the adjoints of the forward in f64", "[cpu][tensor]") {
  std::uint64_t seed = 300;
  for (const ConvCase& c : conv_cases()) {
    INFO(c.name);
    Tensor x = test::random_tensor(c.x, ++seed, DType::f64), w = test::random_tensor(c.w, ++seed, DType::f64);
    Tensor go = test::random_tensor(out_shape(c), ++seed, DType::f64);
    // <conv(x, w), g> = <x, dL/dx> = <w, dL/dw> since the convolution is bilinear.
    const double y_dot_g = dot(conv2d(x, w, Tensor(), c.p), go);
    CHECK(dot(x, conv2d_backward_input(go, w, c.x, c.p)) == Approx(y_dot_g).epsilon(1e-12).margin(1e-12));
    CHECK(dot(w, conv2d_backward_weight(go, x, c.w, c.p)) == Approx(y_dot_g).epsilon(1e-12).margin(1e-12));
  }
}

TEST_CASE("conv2d results agree at 1 and 2 threads", "[cpu][tensor]") {
  test::ConvWeightGradSwitch use(GENERATE(ConvWeightGrad::Direct, ConvWeightGrad::Gemm));
  const ConvCase& c = conv_cases()[1];
  Tensor x = test::random_tensor({5, 3, 9, 8}, 400), w = test::random_tensor(c.w, 401);
  Tensor go = test::random_tensor({5, 5, 5, 4}, 402);
  ThreadCount one(1);
  Tensor y1 = conv2d(x, w, Tensor(), c.p), gw1 = conv2d_backward_weight(go, x, c.w, c.p);
  set_num_threads(2);
  test::require_close(conv2d(x, w, Tensor(), c.p), y1, 0, 0);
  test::require_close(conv2d_backward_weight(go, x, c.w, c.p), gw1, 1e-5, 1e-6);
}

TEST_CASE("conv2d takes an empty batch: empty outputs, zero weight gradients", "[cpu][tensor]") {
  test::ConvWeightGradSwitch use(GENERATE(ConvWeightGrad::Direct, ConvWeightGrad::Gemm));
  const Conv2dParams p{1, 1, 1, 1, 1, 1, 1};
  const Tensor x = Tensor::zeros({0, 3, 5, 5}), w = test::random_tensor({4, 3, 3, 3}, 7);
  CHECK(conv2d(x, w, Tensor(), p).shape() == Shape{0, 4, 5, 5});
  const Tensor go = Tensor::zeros({0, 4, 5, 5});
  CHECK(conv2d_backward_input(go, w, x.shape(), p).shape() == x.shape());
  test::require_close(conv2d_backward_weight(go, x, w.shape(), p), Tensor::zeros(w.shape()), 0, 0);
}

// The gradients are allocated uninitialized, so the kernels must write every element: also
// where no window reaches the input (strides beyond the kernel) and for an empty batch.
// Each gradient's size is first freed full of NaN, right before the gradient is allocated,
// which the block cache (off under ASan) then serves it from.
TEST_CASE("conv2d gradients overwrite every element of reused memory", "[cpu][tensor]") {
  const DType dtype = GENERATE(DType::f32, DType::f64);  // oneDNN, and the reference loops
  test::CpuLayoutSwitch layout(GENERATE(false, true));
  test::ConvWeightGradSwitch use(GENERATE(ConvWeightGrad::Direct, ConvWeightGrad::Gemm));
  INFO(dtype_name(dtype) << (cpu_blocked_layout() ? ", blocked layout" : ", plain layout"));
  const auto free_nan_block = [&](const Shape& shape) { (void)Tensor::full(shape, std::nan(""), {dtype}); };
  std::vector<ConvCase> cases = conv_cases();
  // Whole channel blocks, so that oneDNN also writes blocked gradients; strides beyond the
  // kernel, as in a ResNet's projection shortcut.
  cases.push_back({"1x1 stride 2, 16 channels", {2, 16, 7, 7}, {32, 16, 1, 1}, {2, 2, 0, 0, 1, 1, 1}});
  cases.push_back({"2x2 stride 3, 16 channels", {2, 16, 8, 8}, {16, 16, 2, 2}, {3, 3, 0, 0, 1, 1, 1}});
  std::uint64_t seed = 250;
  for (const ConvCase& c : cases) {
    INFO(c.name);
    Tensor x = test::random_tensor(c.x, ++seed, dtype), w = test::random_tensor(c.w, ++seed, dtype);
    Tensor go = test::random_tensor(out_shape(c), ++seed, dtype);
    const Tensor expected_gx = naive_grad_input(c, go, w), expected_gw = naive_grad_weight(c, go, x);
    free_nan_block(c.x);
    const Tensor gx = conv2d_backward_input(go, w, c.x, c.p);
    test::require_close(gx, expected_gx, 1e-5, 1e-5);
    free_nan_block(c.w);
    const Tensor gw = conv2d_backward_weight(go, x, c.w, c.p);
    test::require_close(gw, expected_gw, 1e-5, 1e-5);
  }
  const Tensor x = Tensor::zeros({0, 16, 5, 5}, {dtype}), go = Tensor::zeros({0, 16, 5, 5}, {dtype});
  const Tensor zeros = Tensor::zeros({16, 16, 3, 3}, {dtype});
  free_nan_block({16, 16, 3, 3});
  const Tensor gw = conv2d_backward_weight(go, x, {16, 16, 3, 3}, {1, 1, 1, 1, 1, 1, 1});
  test::require_close(gw, zeros, 0, 0);
}

TEST_CASE("conv2d reads strided inputs", "[cpu][tensor]") {
  const ConvCase& c = conv_cases()[0];
  Tensor x = test::random_tensor({c.x[0], c.x[1], c.x[3], c.x[2]}, 500).transpose(2, 3);  // (2, 3, 7, 6) view
  Tensor w = test::random_tensor(c.w, 501);
  test::require_close(conv2d(x, w, Tensor(), c.p), naive_conv(c, x, w, Tensor()), 1e-5, 1e-5);
}

TEST_CASE("conv2d argument errors name the op and the shapes", "[cpu][tensor]") {
  Tensor x = Tensor::zeros({1, 4, 5, 5});
  REQUIRE_THROWS_WITH(conv2d(x, Tensor::zeros({2, 3, 3, 3}), Tensor(), {}),
                      Catch::Contains("conv2d") && Catch::Contains("[2, 3, 3, 3]") && Catch::Contains("[1, 4, 5, 5]"));
  Conv2dParams g3;
  g3.groups = 3;
  REQUIRE_THROWS_WITH(conv2d(x, Tensor::zeros({3, 1, 3, 3}), Tensor(), g3), Catch::Contains("groups=3"));
  REQUIRE_THROWS_WITH(conv2d(x, Tensor::zeros({2, 4, 7, 3}), Tensor(), {}),
                      Catch::Contains("conv2d") && Catch::Contains("does not fit"));
  REQUIRE_THROWS_WITH(conv2d(x, Tensor::zeros({2, 4, 3, 3}), Tensor::zeros({3}), {}), Catch::Contains("bias"));
  REQUIRE_THROWS_WITH(conv2d(Tensor::zeros({4, 5, 5}), Tensor::zeros({2, 4, 3, 3}), Tensor(), {}),
                      Catch::Contains("4-D"));
  Conv2dParams zero_stride;
  zero_stride.stride_h = 0;
  REQUIRE_THROWS_WITH(conv2d(x, Tensor::zeros({2, 4, 3, 3}), Tensor(), zero_stride), Catch::Contains("stride"));
  REQUIRE_THROWS_WITH(conv2d_backward_input(Tensor::zeros({1, 2, 4, 4}), Tensor::zeros({2, 4, 3, 3}), {1, 4, 5, 5}, {}),
                      Catch::Contains("grad_out") && Catch::Contains("[1, 2, 3, 3]"));
}

}  // namespace dtrain
