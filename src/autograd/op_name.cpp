#include "autograd/op_name.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>
#include <typeindex>
#include <unordered_map>

namespace dtrain::detail {
namespace {

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> text(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), &std::free);
  return status == 0 && text ? std::string(text.get()) : std::string(mangled);
}

// "dtrain::(anonymous namespace)::fused_layer_norm(dtrain::Variable const&, ...)::{lambda(...)#1}"
// -> "fused_layer_norm"; "dtrain::Foo" -> "Foo".
std::string short_name(std::string_view full) {
  std::string_view owner = full;
  if (const auto lambda = full.find("::{lambda"); lambda != std::string_view::npos) {
    owner = full.substr(0, lambda);
    // Drop the enclosing function's parameter list: from its last top-level '('.
    if (!owner.empty() && owner.back() == ')') {
      int depth = 0;
      for (std::size_t i = owner.size(); i-- > 0;) {
        if (owner[i] == ')') ++depth;
        if (owner[i] == '(' && --depth == 0) {
          owner = owner.substr(0, i);
          break;
        }
      }
    }
  }
  // The last component, outside template arguments.
  int angle = 0;
  for (std::size_t i = owner.size(); i-- > 0;) {
    if (owner[i] == '>') ++angle;
    if (owner[i] == '<') --angle;
    if (angle == 0 && i > 0 && owner[i] == ':' && owner[i - 1] == ':') return std::string(owner.substr(i + 1));
  }
  return std::string(owner);
}

}  // namespace

const std::string& op_name(const GradFn& grad_fn) {
  static std::mutex mutex;
  static std::unordered_map<std::type_index, std::string> names;
  const std::type_index type(grad_fn.target_type());
  std::lock_guard lock(mutex);
  auto it = names.find(type);
  if (it == names.end()) it = names.emplace(type, short_name(demangle(grad_fn.target_type().name()))).first;
  return it->second;
}

}  // namespace dtrain::detail
