#include "dtrain/layers/sequential.h"

#include "dtrain/layers/activation.h"
#include "dtrain/layers/linear.h"
#include "dtrain/layers/normalization.h"
#include "dtrain/layers/pooling.h"

#include <typeinfo>

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
  const auto is_relu = [&](std::size_t i) {
    return i < modules.size() && dynamic_cast<const ReLU*>(modules[i].second.get()) != nullptr;
  };
  for (std::size_t i = 0; i < modules.size(); ++i) {
    Module& m = *modules[i].second;
    if (auto* bn = dynamic_cast<BatchNorm*>(&m); bn != nullptr && is_relu(i + 1) && !m.transforms_input()) {
      y = bn->hooked([&] { return bn->forward_relu(y); });
      ++i;  // the ReLU ran inside
      continue;
    }
    // Only the class itself: a subclass may compute its forward differently.
    if (typeid(m) == typeid(Linear) && is_relu(i + 1) && !m.transforms_input()) {
      y = m.hooked([&] { return static_cast<Linear&>(m).forward_relu(y); });
      ++i;
      continue;
    }
    // ReLU then max pooling runs as max pooling then ReLU: ReLU is monotonic, so the two
    // give the same values and the same input gradient (every window's first maximum, NaN
    // included, survives both ways), with the ReLU's passes on a quarter of the elements.
    // Only the class itself: a subclass may pool differently.
    if (is_relu(i) && i + 1 < modules.size() && typeid(*modules[i + 1].second) == typeid(MaxPool2d)) {
      y = m((*modules[i + 1].second)(y));
      ++i;
      continue;
    }
    y = m(y);
  }
  return y;
}

}  // namespace dtrain::nn
