#include "dtrain/layers/sequential.h"

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
  for (const auto& [name, child] : children()) y = child->forward(y);
  return y;
}

}  // namespace dtrain::nn
