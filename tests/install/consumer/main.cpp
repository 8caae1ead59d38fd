// A program outside the dtrain tree, built against an installed dtrain through
// find_package(dtrain): one training step of a small MLP. It includes the umbrella header,
// so the installed headers are known to be complete and to compile together. Exits 1 unless
// the step lowered a finite loss.
#include "dtrain/dtrain.h"

#include <cmath>
#include <cstdio>

int main() {
  auto model = dtrain::nn::mlp(4, {8}, 2);
  dtrain::optim::SGD sgd(model->parameters(), {.lr = 0.1});
  const dtrain::Variable x(dtrain::Tensor::ones({3, 4}));
  const dtrain::Tensor y = dtrain::Tensor::zeros({3}, {dtrain::DType::i64});
  dtrain::Variable loss = dtrain::cross_entropy(model->forward(x), y);
  loss.backward();
  sgd.step();
  const double before = loss.item();
  const double after = dtrain::cross_entropy(model->forward(x), y).item();
  std::printf("consumer: loss %.4f -> %.4f\n", before, after);
  return std::isfinite(after) && after < before ? 0 : 1;
}
