// Ready-made models. Each is a Sequential, so a pipeline can cut it into stages.
#pragma once

#include "dtrain/layers/sequential.h"

#include <memory>
#include <string>
#include <vector>

namespace dtrain::nn {

// Flatten, then Linear+ReLU per hidden width, then a Linear to `classes`.
std::shared_ptr<Sequential> mlp(std::int64_t inputs, const std::vector<std::int64_t>& hidden, std::int64_t classes);

// The LeNet-style CNN for 28x28x1 input: conv5x5-32 (pad 2), ReLU, maxpool 2, conv5x5-64
// (pad 2), ReLU, maxpool 2, fc 3136-1024, ReLU, dropout, fc 1024-classes.
std::shared_ptr<Sequential> lenet_cnn(std::int64_t in_channels = 1, std::int64_t classes = 10,
                                      double dropout_p = 0.0);

enum class ResNetStem {
  ImageNet,  // conv7x7 stride 2 + maxpool 3x3 stride 2 (224x224 input)
  Cifar,     // conv3x3 stride 1, no max-pool (32x32 input)
};
// ResNet-18/34 (basic blocks) and ResNet-50 (bottlenecks), torchvision layout and init.
std::shared_ptr<Sequential> resnet(int depth, std::int64_t classes = 1000, ResNetStem stem = ResNetStem::ImageNet);

// The CIFAR ResNets of He et al. 2015, section 4.2 (ResNet-20, 32, 44, 56, 110: depth
// 6n + 2): conv3x3-16, three stages of n basic blocks of widths 16, 32, 64 (the last two
// halving the size), global average pool, fc. Shortcuts that change shape are 1x1
// projections (the paper's option B) rather than zero padding. For small images (32x32).
std::shared_ptr<Sequential> resnet_cifar(int depth, std::int64_t classes = 10, std::int64_t in_channels = 3);

}  // namespace dtrain::nn
