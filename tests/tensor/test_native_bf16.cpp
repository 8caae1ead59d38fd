// bf16 products on oneDNN's bf16 kernels (CPUs with AVX-512 BF16 or AMX, cpu_kernels.h)
// against the exact emulation: both multiply the same bf16 pairs exactly and sum in f32,
// only in different orders. So matmul agrees to f32 rounding of the sums, and convolution
// results, which both round to bf16, agree except where a sum lies within f32 rounding of a
// bf16 tie: there they differ by one bf16 step (2^-7 relative at most).
#include "support/test_support.h"

#include <catch2/catch.hpp>

#include <utility>
#include <vector>

using namespace dtrain;
using dtrain::test::Bf16ProductsSwitch;
using dtrain::test::random_tensor;
using dtrain::test::require_close;

namespace {

constexpr double kBf16Step = 1.0 / 128;  // one bf16 step, relative

// `op` with native bf16 kernels and emulated, for comparison.
template <class Op>
std::pair<Tensor, Tensor> native_and_emulated(Op op) {
  Tensor native, emulated;
  {
    Bf16ProductsSwitch on(Bf16Products::Native);
    native = op();
  }
  {
    Bf16ProductsSwitch off(Bf16Products::Emulated);
    emulated = op();
  }
  return {native, emulated};
}

// Whether the native kernels can run here; the test case is skipped (with the reason) if not.
bool native_bf16_here() {
  if (cpu_has_bf16_dot()) return true;
  dtrain::test::skip_test_case("this CPU has no bf16 dot-product instructions (AVX-512 BF16 or AMX)");
  return false;
}

Tensor bf16(const Tensor& t) { return t.to(DType::bf16); }

}  // namespace

TEST_CASE("bf16 matmul on the CPU's bf16 kernels matches the emulation", "[tensor][half]") {
  if (!native_bf16_here()) return;
  dtrain::test::CpuLayoutSwitch restore_threads(cpu_blocked_layout());
  struct Case {
    Shape a, b;
    bool trans_a, trans_b;
  };
  const Case cases[] = {
      {{5, 40}, {40, 6}, false, false},       {{40, 5}, {40, 6}, true, false},  // A stored transposed
      {{5, 40}, {6, 40}, false, true},         {{2, 7, 33}, {2, 33, 9}, false, false},
      {{3, 7, 33}, {33, 9}, false, false},     // one B for every batch entry
      {{130, 300}, {300, 70}, false, false},  // rows split across threads
  };
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& c : cases) {
      INFO("threads " << threads << ", " << shape_str(c.a) << " x " << shape_str(c.b));
      const Tensor a = random_tensor(c.a, 1), b = random_tensor(c.b, 2);
      const auto [native, emulated] =
          native_and_emulated([&] { return matmul(bf16(a), bf16(b), c.trans_a, c.trans_b); });
      CHECK(native.dtype() == DType::f32);
      require_close(native, emulated, 1e-5, 1e-5);
    }
  }
}

TEST_CASE("bf16 convolutions on the CPU's bf16 kernels match the emulation", "[tensor][half]") {
  if (!native_bf16_here()) return;
  std::vector<dtrain::test::ConvGradCase> cases = dtrain::test::conv_grad_cases();
  // Channels that fill whole blocks, so that results are handed on in the blocked layout.
  cases.push_back({{4, 16, 10, 10}, {32, 16, 3, 3}, {.pad_h = 1, .pad_w = 1}});
  cases.push_back({{3, 32, 8, 8}, {16, 32, 1, 1}, {.stride_h = 2, .stride_w = 2}});
  for (bool blocked : {false, true}) {
    dtrain::test::CpuLayoutSwitch layout(blocked);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (const auto& c : cases) {
        INFO((blocked ? "blocked" : "plain") << ", threads " << threads << ", x " << shape_str(c.x) << ", w "
                                               << shape_str(c.w));
        const Tensor x = random_tensor(c.x, 3), w = random_tensor(c.w, 4), bias = random_tensor({c.w[0]}, 5);
        const auto [y, y_ref] = native_and_emulated([&] { return conv2d(bf16(x), bf16(w), bias, c.p); });
        CHECK(y.dtype() == DType::f32);
        require_close(y, y_ref, kBf16Step, 1e-5);
        const Tensor g = random_tensor(y.shape(), 6);
        const auto [dx, dx_ref] =
            native_and_emulated([&] { return conv2d_backward_input(bf16(g), bf16(w), x.shape(), c.p); });
        require_close(dx, dx_ref, kBf16Step, 1e-5);
        const auto [dw, dw_ref] =
            native_and_emulated([&] { return conv2d_backward_weight(bf16(g), bf16(x), w.shape(), c.p); });
        require_close(dw, dw_ref, kBf16Step, 1e-5);
        // Gradients are rounded to bf16 (as cuDNN writes them) on both paths.
        require_close(dx, bf16(dx).to(DType::f32), 0, 0);
        require_close(dw, bf16(dw).to(DType::f32), 0, 0);
      }
    }
  }
}

TEST_CASE("the bf16 kernels run where chosen and the CPU has them; auto chooses them with AMX", "[tensor][half]") {
  Bf16ProductsSwitch emulate(Bf16Products::Emulated);
  CHECK_FALSE(cpu_native_bf16());
  set_cpu_bf16_products(Bf16Products::Native);
  CHECK(cpu_native_bf16() == cpu_has_bf16_dot());
  set_cpu_bf16_products(Bf16Products::Auto);
  if (cpu_native_bf16()) CHECK(cpu_has_bf16_dot());
}
