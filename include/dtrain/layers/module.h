// Module: the base of every layer and model. It owns named parameters (Variables that
// require grad), named buffers (state that is saved but not trained, such as batch-norm
// running statistics) and named child modules, and walks them recursively for
// parameters(), train()/eval(), to(device) and state dicts. Modules are held by
// shared_ptr and never copied, so the pointers they register stay valid.
#pragma once

#include "dtrain/autograd/functions.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::nn {

// Ordered name -> tensor pairs ("features.0.weight"), parameters first, then buffers.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Variable forward(const Variable& x) = 0;
  Variable operator()(const Variable& x) { return forward(x); }
  // The layer's type and configuration, e.g. "Linear(784, 512)".
  virtual std::string describe() const = 0;

  // Recursive, in registration order (the order a pipeline or reducer relies on).
  std::vector<Variable> parameters() const;
  std::vector<std::pair<std::string, Variable>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  std::int64_t num_parameters() const;
  // Replaces the registered child `name` (throws when there is none). Forward passes that
  // iterate children() (Sequential) see the new one; a module that keeps its own typed
  // pointer to a child keeps calling the old one.
  void replace_child(const std::string& name, std::shared_ptr<Module> module);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void to(Device device);
  void zero_grad();

  StateDict state_dict() const;
  // Copies values into the existing tensors. Strict: every key of the module must be
  // present and no other; shapes must match. Errors name the key and both shapes.
  void load_state_dict(const StateDict& state, bool strict = true);

  // A multi-line summary: the module tree with parameter counts.
  std::string summary() const;

 protected:
  Variable register_parameter(std::string name, Tensor value);
  // `slot` is a member of the derived module; the module must outlive the registration.
  void register_buffer(std::string name, Tensor* slot);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    add_child(std::move(name), module);
    return module;
  }

 private:
  void add_child(std::string name, std::shared_ptr<Module> module);
  void collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out) const;
  void collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) const;
  void summarize(const std::string& name, int depth, std::string& out) const;

  std::vector<std::pair<std::string, Variable>> parameters_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

using ModulePtr = std::shared_ptr<Module>;

}  // namespace dtrain::nn
