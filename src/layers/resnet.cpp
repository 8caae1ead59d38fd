// ResNet-18/34/50 (He et al. 2015) in torchvision's layout, and the paper's CIFAR ResNets: stride on the 3x3 conv of a
// bottleneck (v1.5), 1x1 projection shortcuts when the shape changes, Kaiming-normal
// (fan_out) conv init, BN weight 1 / bias 0.
#include "dtrain/layers/activation.h"
#include "dtrain/layers/conv.h"
#include "dtrain/layers/init.h"
#include "dtrain/layers/linear.h"
#include "dtrain/layers/models.h"
#include "dtrain/layers/normalization.h"
#include "dtrain/layers/pooling.h"

namespace dtrain::nn {
namespace {

std::shared_ptr<Conv2d> conv(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride) {
  return std::make_shared<Conv2d>(in, out, k, Conv2dOptions{.stride = stride, .padding = k / 2, .bias = false});
}

// The residual body (a Sequential) plus an optional projection shortcut, then ReLU (fused
// with the addition: one pass over the block's output instead of two, and no sum kept).
class ResidualBlock : public Module {
 public:
  ResidualBlock(std::shared_ptr<Sequential> body, std::shared_ptr<Sequential> shortcut, std::string kind)
      : kind_(std::move(kind)) {
    body_ = register_module("body", std::move(body));
    if (shortcut) shortcut_ = register_module("shortcut", std::move(shortcut));
  }

  Variable forward(const Variable& x) override {
    Variable identity = shortcut_ ? (*shortcut_)(x) : x;
    return add_relu((*body_)(x), identity);
  }
  std::string describe() const override { return kind_; }

 private:
  std::shared_ptr<Sequential> body_, shortcut_;
  std::string kind_;
};

std::shared_ptr<Sequential> projection(std::int64_t in, std::int64_t out, std::int64_t stride) {
  if (stride == 1 && in == out) return nullptr;
  return std::make_shared<Sequential>(
      std::initializer_list<ModulePtr>{conv(in, out, 1, stride), std::make_shared<BatchNorm2d>(out)});
}

ModulePtr basic_block(std::int64_t in, std::int64_t width, std::int64_t stride) {
  auto body = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      conv(in, width, 3, stride), std::make_shared<BatchNorm2d>(width), std::make_shared<ReLU>(),
      conv(width, width, 3, 1), std::make_shared<BatchNorm2d>(width)});
  return std::make_shared<ResidualBlock>(body, projection(in, width, stride), "BasicBlock");
}

ModulePtr bottleneck(std::int64_t in, std::int64_t width, std::int64_t stride) {
  const std::int64_t out = width * 4;
  auto body = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      conv(in, width, 1, 1), std::make_shared<BatchNorm2d>(width), std::make_shared<ReLU>(),
      conv(width, width, 3, stride), std::make_shared<BatchNorm2d>(width), std::make_shared<ReLU>(),
      conv(width, out, 1, 1), std::make_shared<BatchNorm2d>(out)});
  return std::make_shared<ResidualBlock>(body, projection(in, out, stride), "Bottleneck");
}

void init_convs(Module& m) {
  for (auto& [name, p] : m.named_parameters()) {
    if (p.dim() == 4) {
      Tensor w = p.data();
      init::kaiming_normal_(w, init::FanMode::Out);
    }
  }
}

}  // namespace

std::shared_ptr<Sequential> resnet(int depth, std::int64_t classes, ResNetStem stem) {
  std::vector<int> blocks;
  bool use_bottleneck = false;
  switch (depth) {
    case 18: blocks = {2, 2, 2, 2}; break;
    case 34: blocks = {3, 4, 6, 3}; break;
    case 50:
      blocks = {3, 4, 6, 3};
      use_bottleneck = true;
      break;
    default: DTRAIN_FAIL("resnet: depth {} unsupported (expected 18, 34 or 50)", depth);
  }
  auto model = std::make_shared<Sequential>();
  if (stem == ResNetStem::ImageNet) {
    model->push_back(conv(3, 64, 7, 2));
    model->push_back(std::make_shared<BatchNorm2d>(64));
    model->push_back(std::make_shared<ReLU>());
    model->push_back(std::make_shared<MaxPool2d>(3, 2, 1));
  } else {
    model->push_back(conv(3, 64, 3, 1));
    model->push_back(std::make_shared<BatchNorm2d>(64));
    model->push_back(std::make_shared<ReLU>());
  }
  std::int64_t in = 64;
  const std::int64_t widths[] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    for (int b = 0; b < blocks[stage]; ++b) {
      std::int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      if (use_bottleneck) {
        model->push_back(bottleneck(in, widths[stage], stride));
        in = widths[stage] * 4;
      } else {
        model->push_back(basic_block(in, widths[stage], stride));
        in = widths[stage];
      }
    }
  }
  model->push_back(std::make_shared<AdaptiveAvgPool2d>(1, 1));
  model->push_back(std::make_shared<Flatten>());
  model->push_back(std::make_shared<Linear>(in, classes));
  init_convs(*model);
  return model;
}

std::shared_ptr<Sequential> resnet_cifar(int depth, std::int64_t classes, std::int64_t in_channels) {
  DTRAIN_CHECK(depth >= 8 && (depth - 2) % 6 == 0, "resnet_cifar: depth {} is not 6n + 2 (20, 32, 44, 56, 110)", depth);
  const int n = (depth - 2) / 6;
  auto model = std::make_shared<Sequential>();
  model->push_back(conv(in_channels, 16, 3, 1));
  model->push_back(std::make_shared<BatchNorm2d>(16));
  model->push_back(std::make_shared<ReLU>());
  std::int64_t in = 16;
  for (std::int64_t stage = 0; stage < 3; ++stage) {
    const std::int64_t width = 16 << stage;
    for (int b = 0; b < n; ++b) {
      model->push_back(basic_block(in, width, (stage > 0 && b == 0) ? 2 : 1));
      in = width;
    }
  }
  model->push_back(std::make_shared<AdaptiveAvgPool2d>(1, 1));
  model->push_back(std::make_shared<Flatten>());
  model->push_back(std::make_shared<Linear>(in, classes));
  init_convs(*model);
  return model;
}

}  // namespace dtrain::nn
