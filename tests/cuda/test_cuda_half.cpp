// 16-bit floats on CUDA against the CPU: conversions are the same functors (bit-exact),
// matmul sums the same rounded products in another order, and cuDNN's convolutions round
// their result to the operands' type before it is widened to f32 (cuDNN writes outputs in
// the operands' type), so they are compared with the CPU's result rounded the same way.
#include "cuda_test.h"
#include "support/test_support.h"

#include "dtrain/autograd/autocast.h"
#include "dtrain/autograd/functions.h"

namespace dtrain::test {
namespace {

Tensor cpu(const Tensor& t) { return t.to(Device::cpu()); }

// One unit in the last place of the 16-bit type, relative: its rounding of a result.
double ulp(DType half) { return half == DType::f16 ? 1.0 / 1024 : 1.0 / 128; }

}  // namespace

TEST_CASE("CUDA 16-bit conversions match the CPU bit for bit", "[cuda][half]") {
  if (!cuda_ready()) return;
  for (DType half : {DType::f16, DType::bf16}) {
    INFO(dtype_name(half));
    const Tensor x = random_tensor({129, 65}, 1, DType::f32, -70000, 70000);
    require_close(cpu(x.to(kGpu).to(half)).to(DType::f32), x.to(half).to(DType::f32), 0, 0);
    require_close(cpu(x.to(half).to(kGpu).to(DType::f64)), x.to(half).to(DType::f64), 0, 0);
    require_close(cpu(x.to(kGpu).t().to(half)).to(DType::f32), x.t().to(half).to(DType::f32), 0, 0);
    require_close(cpu(Tensor::full({5}, 1.5, {half, kGpu})).to(DType::f32), Tensor::full({5}, 1.5), 0, 0);
  }
}

TEST_CASE("CUDA matmul and conv2d of 16-bit operands match the CPU", "[cuda][half]") {
  if (!cuda_ready()) return;
  for (DType half : {DType::f16, DType::bf16}) {
    INFO(dtype_name(half));
    const Tensor a = random_tensor({3, 70, 130}, 2).to(half), b = random_tensor({130, 90}, 3).to(half);
    const Tensor m = matmul(a.to(kGpu), b.to(kGpu));
    REQUIRE(m.dtype() == DType::f32);
    require_close(cpu(m), matmul(a, b), 1e-5, 1e-5);
    require_close(cpu(matmul(b.to(kGpu), a.to(kGpu).select(0, 1), true, true)), matmul(b, a.select(0, 1), true, true),
                  1e-5, 1e-5);

    const Tensor x = random_tensor({4, 8, 15, 15}, 4).to(half), w = random_tensor({16, 8, 3, 3}, 5).to(half);
    const Conv2dParams p{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
    const Tensor y = conv2d(x.to(kGpu), w.to(kGpu), Tensor(), p);
    REQUIRE(y.dtype() == DType::f32);
    const auto as_cudnn_rounds = [half](const Tensor& t) { return t.to(half).to(DType::f32); };
    require_close(cpu(y), as_cudnn_rounds(conv2d(x, w, Tensor(), p)), 2 * ulp(half), 1e-3);
    const Tensor g = random_tensor(y.shape(), 6).to(half);
    require_close(cpu(conv2d_backward_input(g.to(kGpu), w.to(kGpu), x.shape(), p)),
                  as_cudnn_rounds(conv2d_backward_input(g, w, x.shape(), p)), 2 * ulp(half), 1e-3);
    require_close(cpu(conv2d_backward_weight(g.to(kGpu), x.to(kGpu), w.shape(), p)),
                  as_cudnn_rounds(conv2d_backward_weight(g, x, w.shape(), p)), 2 * ulp(half), 1e-2);
  }
}

TEST_CASE("CUDA autocast linear matches the CPU's", "[cuda][half]") {
  if (!cuda_ready()) return;
  const Tensor xd = random_tensor({64, 96}, 7), wd = random_tensor({48, 96}, 8), g = random_tensor({64, 48}, 9);
  auto run = [&](Device device) {
    Variable x(xd.to(device), true), w(wd.to(device), true);
    Variable y;
    {
      AutocastGuard autocast(DType::bf16);
      y = linear(x, w, Variable());
    }
    y.backward(g.to(device));
    return std::vector<Tensor>{cpu(y.data()), cpu(x.grad()), cpu(w.grad())};
  };
  const auto on_gpu = run(kGpu), on_cpu = run(Device::cpu());
  for (std::size_t i = 0; i < on_cpu.size(); ++i) require_close(on_gpu[i], on_cpu[i], 1e-5, 1e-5);
}

}  // namespace dtrain::test
