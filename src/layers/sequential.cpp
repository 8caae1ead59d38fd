#include "dtrain/layers/sequential.h"

#include "dtrain/layers/activation.h"
#include "dtrain/layers/normalization.h"

namespace dtrain::nn {

Sequential::Sequential(std::initializer_list<ModulePtr> modules) {
  for (const auto& m : modules) push_back(m);
}

Sequential::Sequential(const std::vector<ModulePtr>& modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(ModulePtr module) { register_module(std::to_string(size()), std::move(module)); }

Variable Sequential::forward(const Variable& x) {
  Variable y = x;
  const auto& modules = children();
  for (std::size_t i = 0; i < modules.size(); ++i) {
    auto* bn = dynamic_cast<BatchNorm*>(modules[i].second.get());
    if (bn != nullptr && i + 1 < modules.size() && dynamic_cast<const ReLU*>(modules[i + 1].second.get()) != nullptr) {
      y = bn->forward_relu(y);
      ++i;  // the ReLU ran inside
      continue;
    }
    y = modules[i].second->forward(y);
  }
  return y;
}

}  // namespace dtrain::nn
