// Module: the base of every layer and model. It owns named parameters (Variables that
// require grad), named buffers (state that is saved but not trained, such as batch-norm
// running statistics) and named child modules, and walks them recursively for
// parameters(), train()/eval(), to(device) and state dicts. Modules are held by
// shared_ptr and never copied, so the pointers they register stay valid.
#pragma once

#include "dtrain/autograd/functions.h"

#include <functional>
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
  // forward() between the forward hooks, when there are any. Containers call their children
  // this way (a direct forward() runs without the hooks).
  Variable operator()(const Variable& x) { return hooks_.empty() ? forward(x) : hooked_forward(x); }

  // What runs around this module's forward: sharded data parallelism's stage 3 gathers a
  // layer's parameters before it and frees them after it (and arranges, through the output,
  // their gathering again before the layer's backward); a tensor-parallel layer
  // (dist/tensor_parallel) runs its collectives on the input and the output.
  class ForwardHooks {
   public:
    virtual ~ForwardHooks() = default;
    virtual void before(Module&) {}
    // What the forward reads instead of `input` (itself, or an op on it). A module with such
    // hooks is never fused with its neighbour (Sequential's Linear + ReLU), which would skip it.
    virtual Variable input(Module&, Variable input) { return input; }
    virtual bool transforms_input() const { return false; }
    // Returns what the caller gets instead of `output` (itself, or an op on it).
    virtual Variable after(Module&, Variable output) { return output; }
  };
  // Several sets may be added (a tensor-parallel layer inside a ZeRO-3 unit): before and
  // input run in the order they were added, after in the reverse order.
  void add_forward_hooks(std::shared_ptr<ForwardHooks> hooks);
  // Removes the set added as `hooks` (nothing when it is not there).
  void remove_forward_hooks(const ForwardHooks* hooks);
  bool transforms_input() const;
  // `run` (this module's forward, or a container's fused form of it) between the hooks,
  // which must not transform the input (transforms_input() false).
  Variable hooked(const std::function<Variable()>& run);
  // The layer's type and configuration, e.g. "Linear(784, 512)".
  virtual std::string describe() const = 0;

  // Recursive, in registration order (the order a pipeline or reducer relies on). A
  // parameter registered by several modules (a tied weight) is listed once, under its first
  // name, as PyTorch's parameters() does; a module that holds only its later registration
  // (a pipeline stage) lists it under that one.
  std::vector<Variable> parameters() const;
  std::vector<std::pair<std::string, Variable>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // The later names of parameters registered more than once (tied weights), each with the
  // first: (alias, name), e.g. ("3.lm_head.weight", "0.wte.weight").
  std::vector<std::pair<std::string, std::string>> parameter_aliases() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  std::int64_t num_parameters() const;
  // This module's own parameters, without its children's (names relative to it).
  const std::vector<std::pair<std::string, Variable>>& own_parameters() const { return parameters_; }
  // Replaces the registered child `name` (throws when there is none). Forward passes that
  // iterate children() (Sequential) see the new one; a module that keeps its own typed
  // pointer to a child keeps calling the old one.
  void replace_child(const std::string& name, std::shared_ptr<Module> module);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void to(Device device);
  void zero_grad();

  // A tied weight appears under each of its names (as in PyTorch's state_dict), so that a
  // pipeline stage holding one of its modules finds the name it knows it by.
  StateDict state_dict() const;
  // Copies values into the existing tensors. Strict: every key of the module must be
  // present and no other; shapes must match. Errors name the key and both shapes.
  void load_state_dict(const StateDict& state, bool strict = true);

  // A multi-line summary: the module tree with parameter counts.
  std::string summary() const;

 protected:
  Variable register_parameter(std::string name, Tensor value);
  // A parameter another module registered too (a tied weight: the same Variable, trained once).
  Variable register_parameter(std::string name, Variable shared);
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
  std::vector<std::shared_ptr<ForwardHooks>> hooks_;
  Variable hooked_forward(const Variable& x);
};

using ModulePtr = std::shared_ptr<Module>;

}  // namespace dtrain::nn
