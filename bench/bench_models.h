// The models the training benchmarks run, by the names their --model flags take, and the
// one fixed synthetic batch each step trains on.
#pragma once

#include "dtrain/layers/models.h"
#include "dtrain/tensor/ops.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace dtrain::bench {

struct BenchModel {
  std::shared_ptr<nn::Module> model;
  Shape sample;  // one input, without the batch dim
  std::int64_t classes;
};

// The names bench_model takes.
inline const std::vector<std::string>& bench_model_names() {
  static const std::vector<std::string> names{
      "mlp", "mlp_50m", "mlp_1b", "cnn", "resnet20_cifar", "resnet18_cifar", "resnet18_224", "resnet50_224"};
  return names;
}

// mlp (784-512-512-10), mlp_50m (16 equal 1768x1768 layers and a 10-way head: 50.0M
// parameters, for sharded data parallelism's memory), mlp_1b (14 equal 8192x8192 layers and
// a 10-way head: 0.94B parameters, 15 GB with Adam in f32: too big for plain data
// parallelism on two ranks of a 24 GiB machine), cnn (LeNet-style), resnet20_cifar (He et
// al.'s CIFAR ResNet-20, 0.27M parameters) and resnet18_cifar (32x32x3, 10 classes), resnet18_224 or resnet50_224
// (224x224x3, 1000 classes).
inline BenchModel bench_model(const std::string& name) {
  if (name == "mlp") return {nn::mlp(28 * 28, {512, 512}, 10), {1, 28, 28}, 10};
  if (name == "mlp_50m") return {nn::mlp(1768, std::vector<std::int64_t>(16, 1768), 10), {1768}, 10};
  if (name == "mlp_1b") return {nn::mlp(8192, std::vector<std::int64_t>(14, 8192), 10), {8192}, 10};
  if (name == "cnn") return {nn::lenet_cnn(1, 10), {1, 28, 28}, 10};
  if (name == "resnet20_cifar") return {nn::resnet_cifar(20, 10), {3, 32, 32}, 10};
  if (name == "resnet18_cifar") return {nn::resnet(18, 10, nn::ResNetStem::Cifar), {3, 32, 32}, 10};
  if (name == "resnet50_224") return {nn::resnet(50, 1000, nn::ResNetStem::ImageNet), {3, 224, 224}, 1000};
  return {nn::resnet(18, 1000, nn::ResNetStem::ImageNet), {3, 224, 224}, 1000};
}

struct Batch {
  Tensor x, y;
};

// `batch` normal inputs shaped like m's samples and uniform labels, both from `seed`.
inline Batch synthetic_batch(const BenchModel& m, std::int64_t batch, std::uint64_t seed) {
  Shape shape = m.sample;
  shape.insert(shape.begin(), batch);
  Tensor x = Tensor::empty(shape);
  Generator gen(seed);
  normal_(x, 0, 1, &gen);
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(batch));
  for (auto& l : labels) l = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(m.classes));
  return {x, Tensor::from_vector(labels, {batch})};
}

}  // namespace dtrain::bench
