// A program outside the dtrain tree, built against an installed dtrain through
// find_package(dtrain): one training step of a small MLP. It includes the umbrella header,
// so the installed headers are known to be complete and to compile together.
#include "dtrain/dtrain.h"

#include <cstdio>

int main() {
  auto model = dtrain::nn::mlp(4, {8}, 2);
  dtrain::optim::SGD sgd(model->parameters(), {.lr = 0.1});
  dtrain::Variable loss = dtrain::cross_entropy(model->forward(dtrain::Variable(dtrain::Tensor::ones({3, 4}))),
                                                dtrain::Tensor::zeros({3}, {dtrain::DType::i64}));
  loss.backward();
  sgd.step();
  std::printf("consumer: loss %.4f\n", loss.item());
  return 0;
}
