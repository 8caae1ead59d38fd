// Winograd convolutions on the CPU (oneDNN's F(4x4, 3x3) kernels, cpu_kernels.h,
// ConvAlgorithm) against an f64 reference and against the direct kernels. Winograd adds the
// roundings of its tile transforms: its error against f64 is a few times the direct
// kernels', both far below the bound of 1e-5 of the outputs' scale used here (5e-6 at most
// on ResNet layers, bench/results/conv_winograd_layers.txt). Results that differ from direct ones
// at all show that Winograd ran; equal ones that it did not.
#include "support/test_support.h"

#include <catch2/catch.hpp>

using namespace dtrain;
using dtrain::test::random_tensor;

namespace {

using dtrain::test::ConvAlgorithmSwitch;

const Conv2dParams kSame3x3{1, 1, 1, 1, 1, 1, 1};  // stride 1, padding 1: Winograd applies

// The three directions of a convolution with kernel 3x3, stride 1, padding 1, by the
// current ConvAlgorithm.
struct ConvResults {
  Tensor y, dx, dw;
};
ConvResults convolve(const Tensor& x, const Tensor& w, const Tensor& dy) {
  return {conv2d(x, w, Tensor(), kSame3x3), conv2d_backward_input(dy, w, x.shape(), kSame3x3),
          conv2d_backward_weight(dy, x, w.shape(), kSame3x3)};
}
ConvResults convolve(ConvAlgorithm mode, const Tensor& x, const Tensor& w, const Tensor& dy) {
  ConvAlgorithmSwitch use(mode);
  return convolve(x, w, dy);
}

// The same in f64 (the CPU's plain loops, not oneDNN).
ConvResults reference(const Tensor& x, const Tensor& w, const Tensor& dy) {
  return convolve(x.to(DType::f64), w.to(DType::f64), dy.to(DType::f64));
}

// Largest |a - b| over the largest |b|.
double relative_error(const Tensor& a, const Tensor& b) {
  return max_abs_diff(a, b) / max_abs_diff(b, Tensor::zeros(b.shape()));
}

bool same(const Tensor& a, const Tensor& b) { return a.to_vector<float>() == b.to_vector<float>(); }
bool same(const ConvResults& a, const ConvResults& b) { return same(a.y, b.y) && same(a.dx, b.dx) && same(a.dw, b.dw); }
bool differ_everywhere(const ConvResults& a, const ConvResults& b) {
  return !same(a.y, b.y) && !same(a.dx, b.dx) && !same(a.dw, b.dw);
}

// Whether oneDNN has Winograd kernels on this CPU; the test case is skipped if not.
bool winograd_here() {
  if (cpu_has_winograd()) return true;
  dtrain::test::skip_test_case("oneDNN's Winograd convolutions need AVX-512, which this CPU lacks");
  return false;
}

struct Problem {
  Tensor x, w, dy;
};
// n images of c channels, hw x hw, into o channels.
Problem problem(std::int64_t n, std::int64_t c, std::int64_t hw, std::int64_t o) {
  return {random_tensor({n, c, hw, hw}, 11), random_tensor({o, c, 3, 3}, 12), random_tensor({n, o, hw, hw}, 13)};
}

}  // namespace

TEST_CASE("Winograd convolutions match an f64 reference to a few f32 roundings", "[tensor][conv]") {
  if (!winograd_here()) return;
  dtrain::test::CpuLayoutSwitch restore(GENERATE(true, false));
  set_num_threads(GENERATE(1, 2));
  struct Shape4 {
    std::int64_t n, c, hw, o;
  };
  for (const Shape4 s : {Shape4{2, 16, 8, 16}, Shape4{3, 32, 13, 48}, Shape4{2, 64, 4, 16}}) {
    INFO("x " << s.n << "x" << s.c << "x" << s.hw << "x" << s.hw << " into " << s.o << " channels, "
              << num_threads() << " threads, blocked " << cpu_blocked_layout());
    const Problem p = problem(s.n, s.c, s.hw, s.o);
    const ConvResults wino = convolve(ConvAlgorithm::Winograd, p.x, p.w, p.dy);
    const ConvResults direct = convolve(ConvAlgorithm::Direct, p.x, p.w, p.dy);
    const ConvResults ref = reference(p.x, p.w, p.dy);
    CHECK(differ_everywhere(wino, direct));  // Winograd ran
    CHECK(relative_error(wino.y, ref.y) < 1e-5);
    CHECK(relative_error(wino.dx, ref.dx) < 1e-5);
    CHECK(relative_error(wino.dw, ref.dw) < 1e-5);
    // Direct kernels: well within the same bound, so the bound tells them apart from wrong results.
    CHECK(relative_error(direct.y, ref.y) < 1e-6);
  }
}

TEST_CASE("Auto takes Winograd from 64 channels and 512 output positions per thread's slice", "[tensor][conv]") {
  if (!winograd_here()) return;
  dtrain::test::CpuLayoutSwitch restore(true);
  set_num_threads(1);
  // 8 images of 8x8 outputs: 4 tiles of 4x4 each, 32 in all.
  const Problem p = problem(8, 64, 8, 64);
  const ConvResults wino = convolve(ConvAlgorithm::Winograd, p.x, p.w, p.dy);
  const ConvResults direct = convolve(ConvAlgorithm::Direct, p.x, p.w, p.dy);
  REQUIRE(differ_everywhere(wino, direct));
  CHECK(same(convolve(ConvAlgorithm::Auto, p.x, p.w, p.dy), wino));
  // Two threads: slices of 4 images, 16 tiles each. (Weight gradients are summed per slice,
  // so the direct reference is taken at 2 threads too.)
  set_num_threads(2);
  CHECK(same(convolve(ConvAlgorithm::Auto, p.x, p.w, p.dy), convolve(ConvAlgorithm::Direct, p.x, p.w, p.dy)));
  CHECK(differ_everywhere(convolve(ConvAlgorithm::Winograd, p.x, p.w, p.dy),
                          convolve(ConvAlgorithm::Direct, p.x, p.w, p.dy)));
  // 7x7 outputs fill only 49 of their four tiles' 64 positions: 10 images are 490
  // positions (direct), 11 are 539 (Winograd).
  set_num_threads(1);
  const Problem q10 = problem(10, 64, 7, 64), q11 = problem(11, 64, 7, 64);
  const ConvResults direct_q10 = convolve(ConvAlgorithm::Direct, q10.x, q10.w, q10.dy);
  CHECK(differ_everywhere(convolve(ConvAlgorithm::Winograd, q10.x, q10.w, q10.dy), direct_q10));
  CHECK(same(convolve(ConvAlgorithm::Auto, q10.x, q10.w, q10.dy), direct_q10));
  CHECK(same(convolve(ConvAlgorithm::Auto, q11.x, q11.w, q11.dy),
             convolve(ConvAlgorithm::Winograd, q11.x, q11.w, q11.dy)));
  // 32 channels in or out: direct.
  for (const Problem& r : {problem(8, 32, 8, 64), problem(8, 64, 8, 32)}) {
    const ConvResults direct_r = convolve(ConvAlgorithm::Direct, r.x, r.w, r.dy);
    CHECK(same(convolve(ConvAlgorithm::Auto, r.x, r.w, r.dy), direct_r));
    CHECK(differ_everywhere(convolve(ConvAlgorithm::Winograd, r.x, r.w, r.dy), direct_r));
  }
}

TEST_CASE("Winograd is asked for only where it applies, and falls back where oneDNN lacks it", "[tensor][conv]") {
  dtrain::test::CpuLayoutSwitch restore(true);
  set_num_threads(1);
  const Tensor x = random_tensor({2, 16, 8, 8}, 21), w = random_tensor({16, 16, 3, 3}, 22);
  // Strided, dilated and grouped convolutions and 5x5 kernels run the direct kernels under
  // any setting, and so do those oneDNN has no Winograd kernel for (padding 2).
  const auto equal_under_both = [](auto conv) {
    Tensor wino, direct;
    {
      ConvAlgorithmSwitch use(ConvAlgorithm::Winograd);
      wino = conv();
    }
    {
      ConvAlgorithmSwitch use(ConvAlgorithm::Direct);
      direct = conv();
    }
    return same(wino, direct);
  };
  CHECK(equal_under_both([&] { return conv2d(x, w, Tensor(), {2, 2, 1, 1, 1, 1, 1}); }));
  CHECK(equal_under_both([&] { return conv2d(x, w, Tensor(), {1, 1, 2, 2, 2, 2, 1}); }));
  CHECK(equal_under_both([&] { return conv2d(x, random_tensor({16, 8, 3, 3}, 23), Tensor(), {1, 1, 1, 1, 1, 1, 2}); }));
  const Tensor w5 = random_tensor({16, 16, 5, 5}, 24);
  CHECK(equal_under_both([&] { return conv2d(x, w5, Tensor(), {1, 1, 2, 2, 1, 1, 1}); }));
  CHECK(equal_under_both([&] { return conv2d(x, w, Tensor(), {1, 1, 2, 2, 1, 1, 1}); }));
  // bf16 operands (oneDNN's bf16 kernels under autocast) have no Winograd kernels either.
  if (cpu_has_bf16_dot()) {
    dtrain::test::Bf16ProductsSwitch native(Bf16Products::Native);
    CHECK(equal_under_both([&] {
      return conv2d(x.to(DType::bf16), w.to(DType::bf16), Tensor(), kSame3x3);
    }));
  }
}

TEST_CASE("a Winograd convolution's output stays in the blocked layout", "[tensor][conv][blocked]") {
  if (!winograd_here()) return;
  dtrain::test::CpuLayoutSwitch on(true);
  set_num_threads(1);
  ConvAlgorithmSwitch use(ConvAlgorithm::Winograd);
  const Problem p = problem(2, 16, 8, 16);
  const Tensor y = conv2d(p.x, p.w, Tensor(), kSame3x3);
  CHECK(y.storage()->layout() != nullptr);
  // and the next convolution reads it as it is, with the same result as from plain values
  const Tensor w2 = random_tensor({16, 16, 3, 3}, 31);
  const Tensor from_blocked = conv2d(y, w2, Tensor(), kSame3x3);
  const Tensor from_plain = conv2d(Tensor::from_vector(y.to_vector<float>(), y.shape()), w2, Tensor(), kSame3x3);
  CHECK(same(from_blocked, from_plain));
}
