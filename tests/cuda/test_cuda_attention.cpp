// CUDA's fused attention kernels (src/tensor/cuda/flash_attention.cu) against the composed
// ops on the same device and the CPU's fused kernels: sequence lengths that end inside a
// 32-row tile and span several, head sizes below, at and past a warp's 32 lanes, causal or
// not, grouped-query heads, q seen through (B, T, H, D) memory as the models give it, f32
// and f64. Tolerances: sums over D and over keys in other orders; 1e-5 relative in norm for
// f32, 1e-12 for f64.
#include "cuda_test.h"
#include "dtrain/autograd/attention.h"
#include "dtrain/tensor/fused_attention.h"

#include <cmath>

namespace dtrain::test {
namespace {

double relative(const Tensor& got, const Tensor& want) {
  const Tensor a = got.to(Device::cpu()).to(DType::f64), b = want.to(Device::cpu()).to(DType::f64);
  return std::sqrt(sum(square(sub(a, b))).item()) / std::max(std::sqrt(sum(square(b)).item()), 1e-30);
}

struct Case {
  std::int64_t steps, head_dim, kv_heads;
  bool causal;
  DType dtype;
};

// Output and the three gradients of attention on `device`, fused or composed.
std::vector<Tensor> run(const Case& c, Device device, bool fused) {
  FusedKernelsSwitch fusion(fused);
  const std::int64_t heads = 4;
  // q through (B, T, H, D) memory, as a model's projection gives it; k, v contiguous.
  Tensor q = random_tensor({2, c.steps, heads, c.head_dim}, 1, c.dtype).transpose(1, 2);
  Tensor k = random_tensor({2, c.kv_heads, c.steps, c.head_dim}, 2, c.dtype);
  Tensor v = random_tensor({2, c.kv_heads, c.steps, c.head_dim}, 3, c.dtype);
  Tensor g = random_tensor({2, heads, c.steps, c.head_dim}, 4, c.dtype);
  Variable vq(q.to(device), true), vk(k.to(device), true), vv(v.to(device), true);
  Variable out = scaled_dot_product_attention(vq, vk, vv, {.causal = c.causal});
  out.backward(g.to(device));
  return {out.data(), vq.grad(), vk.grad(), vv.grad()};
}

}  // namespace

TEST_CASE("CUDA fused attention equals the composed ops and the CPU's kernels", "[cuda]") {
  if (!cuda_ready()) return;
  REQUIRE(has_fused_attention(kGpu, DType::f32, 64));
  for (const Case& c : {Case{1, 8, 4, true, DType::f32}, Case{37, 64, 2, true, DType::f32},
                        Case{70, 100, 1, false, DType::f32}, Case{50, 32, 1, true, DType::f32},
                        Case{33, 1, 4, false, DType::f32},
                        Case{65, 40, 2, true, DType::f64}, Case{96, 128, 4, false, DType::f64}}) {
    const std::vector<Tensor> fused = run(c, kGpu, true), composed = run(c, kGpu, false), cpu = run(c, Device::cpu(), true);
    const double tolerance = c.dtype == DType::f64 ? 1e-12 : 1e-5;
    for (std::size_t i = 0; i < 4; ++i) {
      INFO("T " << c.steps << ", D " << c.head_dim << ", kv heads " << c.kv_heads << ", causal " << c.causal << ", "
                << dtype_name(c.dtype) << ", output " << i);
      REQUIRE(relative(fused[i], composed[i]) < tolerance);
      REQUIRE(relative(fused[i], cpu[i]) < tolerance);
    }
  }
}

TEST_CASE("CUDA attention past the fused kernels' shared memory runs the composed ops", "[cuda]") {
  if (!cuda_ready()) return;
  // 8192 doubles a row: a key tile alone is 2 MB, past any device's shared memory.
  REQUIRE_FALSE(has_fused_attention(kGpu, DType::f64, 8192));
  REQUIRE_FALSE(has_fused_attention(kGpu, DType::bf16, 64));
  const Case c{3, 8192, 4, true, DType::f64};
  const std::vector<Tensor> gpu = run(c, kGpu, true), cpu = run(c, Device::cpu(), true);
  for (std::size_t i = 0; i < 4; ++i) REQUIRE(relative(gpu[i], cpu[i]) < 1e-12);
  Tensor q = random_tensor({1, 4, 3, 8192}, 1, DType::f64).to(kGpu);
  REQUIRE_THROWS_WITH(attention_forward(q, q, q, {}),
                      Catch::Contains("attention_forward: no fused attention kernel on cuda:0 for f64 heads of 8192"));
}

}  // namespace dtrain::test
