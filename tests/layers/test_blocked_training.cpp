// Whole networks compute the same loss and gradients with CPU activations held in the
// blocked layout (dtrain/tensor/cpu_kernels.h) and without: to float rounding, since batch
// norm sums a block lane by lane and the plain kernel plane by plane. The single kernels:
// tests/tensor/test_blocked_layout.cpp.
#include "support/test_support.h"

#include "dtrain/layers/models.h"

#include <vector>

namespace dtrain {
namespace {

using test::random_tensor;

// |a - b| <= rtol * max|b| + atol everywhere: relative to the tensor's scale, as a
// gradient's rounding is, and one reduction instead of an assertion per element (ResNet-18
// has 11M parameters).
void require_close_to_scale(const Tensor& a, const Tensor& b, double rtol, double atol) {
  REQUIRE(a.shape() == b.shape());
  const double diff = max(abs(sub(a, b))).item(), scale = max(abs(b)).item();
  CHECK(diff <= rtol * scale + atol);
}

// Loss and every gradient of a model on one batch.
struct Run {
  double loss;
  std::vector<Tensor> grads;
  Tensor input_grad;
};

Run train_step(const std::shared_ptr<nn::Sequential>& model, const Tensor& x, const Tensor& y) {
  model->zero_grad();
  Variable input(x.clone(), true);
  Variable loss = cross_entropy(model->forward(input), y);
  loss.backward();
  Run run{loss.data().item(), {}, input.grad().clone()};
  for (const Variable& p : model->parameters()) run.grads.push_back(p.grad().clone());
  return run;
}

void require_same_training(const std::shared_ptr<nn::Sequential>& model, const Tensor& x, const Tensor& y) {
  model->train();
  const Run blocked = [&] {
    test::CpuLayoutSwitch on(true);
    return train_step(model, x, y);
  }();
  const Run plain = [&] {
    test::CpuLayoutSwitch off(false);
    return train_step(model, x, y);
  }();
  CHECK(blocked.loss == Approx(plain.loss).epsilon(1e-5));
  REQUIRE(blocked.grads.size() == plain.grads.size());
  for (std::size_t i = 0; i < plain.grads.size(); ++i) {
    INFO("parameter " << i);
    require_close_to_scale(blocked.grads[i], plain.grads[i], 1e-4, 1e-7);
  }
  require_close_to_scale(blocked.input_grad, plain.input_grad, 1e-4, 1e-9);
}

TEST_CASE("a CIFAR ResNet trains the same with blocked activations, on 1 and 2 threads", "[blocked]") {
  const int threads = GENERATE(1, 2);
  // Weight gradients from blocked inputs by either kernel (GEMM reads them as plain).
  const ConvWeightGrad mode = GENERATE(ConvWeightGrad::Direct, ConvWeightGrad::Gemm);
  test::ConvWeightGradSwitch use(mode);
  test::CpuLayoutSwitch restore(cpu_blocked_layout());
  set_num_threads(threads);
  manual_seed(4);
  auto model = nn::resnet_cifar(8, 10);
  const Tensor x = random_tensor({4, 3, 16, 16}, 11);
  const Tensor y = Tensor::from_vector<std::int64_t>({1, 7, 3, 0}, {4});
  require_same_training(model, x, y);
}

TEST_CASE("a ResNet-18 with the ImageNet stem (max pool, projections) trains the same with blocked activations",
          "[blocked]") {
  manual_seed(5);
  auto model = nn::resnet(18, 10, nn::ResNetStem::ImageNet);
  // 64x64 leaves the last stage 2x2: batch norm over 16 values per channel. (At 1x1 and 2
  // images, two values per channel, it is so ill-conditioned that float rounding alone
  // moves the gradients by 20%, with either layout.)
  const Tensor x = random_tensor({4, 3, 64, 64}, 12);
  const Tensor y = Tensor::from_vector<std::int64_t>({4, 9, 0, 2}, {4});
  require_same_training(model, x, y);
}

}  // namespace
}  // namespace dtrain
