// Sequential: runs its children in order. The children are named "0", "1", ...; the
// pipeline-parallel module cuts a Sequential into stages. A BatchNorm followed by a ReLU
// runs as one fused step (BatchNorm::forward_relu): the same result, with two passes over
// the activations fewer forward and one backward. A Linear followed by a ReLU runs as
// Linear::forward_relu (the bias added and the ReLU taken in one pass). A ReLU followed
// by a MaxPool2d runs after it instead, on the pooled activations: the same values and
// gradients, with the ReLU's work cut by the pooling factor.
#pragma once

#include "dtrain/layers/module.h"

#include <initializer_list>

namespace dtrain::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<ModulePtr> modules);
  explicit Sequential(const std::vector<ModulePtr>& modules);

  void push_back(ModulePtr module);
  std::size_t size() const { return children().size(); }
  const ModulePtr& operator[](std::size_t i) const { return children().at(i).second; }

  Variable forward(const Variable& x) override;
  std::string describe() const override { return "Sequential"; }
};

}  // namespace dtrain::nn
