#include "dtrain/layers/models.h"

#include "dtrain/layers/activation.h"
#include "dtrain/layers/conv.h"
#include "dtrain/layers/linear.h"
#include "dtrain/layers/pooling.h"

namespace dtrain::nn {

std::shared_ptr<Sequential> mlp(std::int64_t inputs, const std::vector<std::int64_t>& hidden, std::int64_t classes) {
  auto model = std::make_shared<Sequential>();
  model->push_back(std::make_shared<Flatten>());
  std::int64_t width = inputs;
  for (std::int64_t h : hidden) {
    model->push_back(std::make_shared<Linear>(width, h));
    model->push_back(std::make_shared<ReLU>());
    width = h;
  }
  model->push_back(std::make_shared<Linear>(width, classes));
  return model;
}

std::shared_ptr<Sequential> lenet_cnn(std::int64_t in_channels, std::int64_t classes, double dropout_p) {
  auto model = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Conv2d>(in_channels, 32, 5, Conv2dOptions{.padding = 2}),
      std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(2),
      std::make_shared<Conv2d>(32, 64, 5, Conv2dOptions{.padding = 2}),
      std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(2),
      std::make_shared<Flatten>(),
      std::make_shared<Linear>(64 * 7 * 7, 1024),
      std::make_shared<ReLU>(),
  });
  if (dropout_p > 0) model->push_back(std::make_shared<Dropout>(dropout_p));
  model->push_back(std::make_shared<Linear>(1024, classes));
  return model;
}

}  // namespace dtrain::nn
