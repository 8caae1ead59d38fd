#include "dtrain/layers/module.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace dtrain::nn {
namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

void check_new_name(const std::string& name, const char* what) {
  DTRAIN_CHECK(!name.empty() && name.find('.') == std::string::npos,
               "Module: {} name '{}' must be non-empty and contain no '.'", what, name);
}
}  // namespace

Variable Module::register_parameter(std::string name, Tensor value) {
  check_new_name(name, "parameter");
  Variable v(std::move(value), true);
  parameters_.emplace_back(std::move(name), v);
  return v;
}

Variable Module::register_parameter(std::string name, Variable shared) {
  check_new_name(name, "parameter");
  DTRAIN_CHECK(shared.defined() && shared.is_leaf() && shared.requires_grad(),
               "Module: shared parameter '{}' must be a leaf that requires grad", name);
  parameters_.emplace_back(std::move(name), shared);
  return shared;
}

void Module::register_buffer(std::string name, Tensor* slot) {
  check_new_name(name, "buffer");
  buffers_.emplace_back(std::move(name), slot);
}

void Module::add_child(std::string name, std::shared_ptr<Module> module) {
  check_new_name(name, "child module");
  DTRAIN_CHECK(module != nullptr, "Module: child module '{}' is null", name);
  children_.emplace_back(std::move(name), std::move(module));
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> module) {
  DTRAIN_CHECK(module != nullptr, "replace_child: the new module for '{}' is null", name);
  for (auto& [n, child] : children_) {
    if (n == name) {
      child = std::move(module);
      return;
    }
  }
  DTRAIN_FAIL("replace_child: no child named '{}'", name);
}

void Module::collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out) const {
  for (const auto& [name, p] : parameters_) out.emplace_back(join(prefix, name), p);
  for (const auto& [name, child] : children_) child->collect_parameters(join(prefix, name), out);
}

void Module::collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) const {
  for (const auto& [name, b] : buffers_) out.emplace_back(join(prefix, name), b);
  for (const auto& [name, child] : children_) child->collect_buffers(join(prefix, name), out);
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Variable>> all;
  collect_parameters("", all);
  std::vector<std::pair<std::string, Variable>> out;
  std::unordered_set<const void*> seen;
  for (auto& entry : all) {
    if (seen.insert(entry.second.id()).second) out.push_back(std::move(entry));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> Module::parameter_aliases() const {
  std::vector<std::pair<std::string, Variable>> all;
  collect_parameters("", all);
  std::unordered_map<const void*, std::string> first;
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, p] : all) {
    const auto [it, fresh] = first.emplace(p.id(), name);
    if (!fresh) out.emplace_back(name, it->second);
  }
  return out;
}

std::vector<Variable> Module::parameters() const {
  std::vector<Variable> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect_buffers("", slots);
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, slot] : slots) out.emplace_back(name, *slot);
  return out;
}

std::int64_t Module::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

void Module::add_forward_hooks(std::shared_ptr<ForwardHooks> hooks) {
  DTRAIN_CHECK(hooks != nullptr, "Module::add_forward_hooks: null hooks for {}", describe());
  hooks_.push_back(std::move(hooks));
}

void Module::remove_forward_hooks(const ForwardHooks* hooks) {
  std::erase_if(hooks_, [&](const std::shared_ptr<ForwardHooks>& h) { return h.get() == hooks; });
}

bool Module::transforms_input() const {
  return std::any_of(hooks_.begin(), hooks_.end(), [](const auto& h) { return h->transforms_input(); });
}

Variable Module::hooked_forward(const Variable& x) {
  const auto hooks = hooks_;  // the hooks may remove themselves
  for (const auto& h : hooks) h->before(*this);
  Variable in = x;
  for (const auto& h : hooks) in = h->input(*this, std::move(in));
  Variable out = forward(in);
  for (auto h = hooks.rbegin(); h != hooks.rend(); ++h) out = (*h)->after(*this, std::move(out));
  return out;
}

Variable Module::hooked(const std::function<Variable()>& run) {
  if (hooks_.empty()) return run();
  DTRAIN_CHECK(!transforms_input(), "{}: its forward hooks transform the input, which a fused forward cannot give them",
               describe());
  const auto hooks = hooks_;
  for (const auto& h : hooks) h->before(*this);
  Variable out = run();
  for (auto h = hooks.rbegin(); h != hooks.rend(); ++h) out = (*h)->after(*this, std::move(out));
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device) {
  for (auto& [name, p] : parameters_) p.set_data(p.data().to(device));
  for (auto& [name, slot] : buffers_) *slot = slot->to(device);
  for (auto& [name, child] : children_) child->to(device);
}

void Module::zero_grad() {
  for (auto& p : parameters()) p.zero_grad();
}

StateDict Module::state_dict() const {
  StateDict out;
  std::vector<std::pair<std::string, Variable>> all;  // a tied weight under each of its names
  collect_parameters("", all);
  for (auto& [name, p] : all) out.emplace_back(name, p.data());
  for (auto& [name, b] : named_buffers()) out.emplace_back(name, b);
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) {
    DTRAIN_CHECK(given.emplace(name, &t).second, "load_state_dict: key '{}' appears twice", name);
  }
  std::vector<std::pair<std::string, Variable>> all;  // a tied weight under each of its names
  collect_parameters("", all);
  std::vector<std::pair<std::string, Tensor>> targets;
  for (auto& [name, p] : all) targets.emplace_back(name, p.data());
  std::vector<std::pair<std::string, Tensor*>> buffer_slots;
  collect_buffers("", buffer_slots);
  for (auto& [name, slot] : buffer_slots) targets.emplace_back(name, *slot);

  std::unordered_set<std::string> used;
  NoGradGuard no_grad;
  for (auto& [name, target] : targets) {
    auto it = given.find(name);
    if (it == given.end()) {
      DTRAIN_CHECK(!strict, "load_state_dict: key '{}' missing from the state dict", name);
      continue;
    }
    const Tensor& src = *it->second;
    DTRAIN_CHECK(src.shape() == target.shape(), "load_state_dict: '{}' has shape {}, the module expects {}", name,
                 shape_str(src.shape()), shape_str(target.shape()));
    target.copy_(src);
    used.insert(name);
  }
  if (strict) {
    for (const auto& [name, t] : state) {
      DTRAIN_CHECK(used.count(name), "load_state_dict: unexpected key '{}' (the module has no such entry)", name);
    }
  }
}

void Module::summarize(const std::string& name, int depth, std::string& out) const {
  std::int64_t own = 0;
  for (const auto& [n, p] : parameters_) own += p.numel();
  out += fmt::format("{:{}}{}{}{}", "", 2 * depth, name.empty() ? "" : name + ": ", describe(),
                     own ? fmt::format("  [{} params]", own) : "");
  out += "\n";
  for (const auto& [n, child] : children_) child->summarize(n, depth + 1, out);
}

std::string Module::summary() const {
  std::string out;
  summarize("", 0, out);
  out += fmt::format("total parameters: {}\n", num_parameters());
  return out;
}

}  // namespace dtrain::nn
