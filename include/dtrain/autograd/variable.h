// Variable: a Tensor plus what reverse-mode differentiation needs. Define-by-run: every
// differentiable op (functions.h) on Variables that require grad records a node holding
// its inputs and a backward function; backward() walks the recorded graph in reverse
// topological order, accumulates gradients into leaves, fires their gradient-ready hooks,
// and frees the graph.
#pragma once

#include "dtrain/tensor/tensor.h"

#include <functional>
#include <memory>
#include <vector>

namespace dtrain {

class Variable;

// Receives the gradient of the op's output and adds the inputs' gradients (add_grad).
using GradFn = std::function<void(std::vector<Variable>& inputs, const Tensor& grad_output)>;
// Called on a leaf once its gradient for the running backward() is complete.
using GradHook = std::function<void(Variable& leaf)>;

class Variable {
 public:
  Variable() = default;
  // A leaf: a parameter (requires_grad) or an input (no grad).
  explicit Variable(Tensor data, bool requires_grad = false);
  // The output of a differentiable op. Records `inputs` and `grad_fn` when grad mode is
  // enabled and any input requires grad; otherwise makes a constant.
  Variable(Tensor data, std::vector<Variable> inputs, GradFn grad_fn);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& data() const;
  // Replaces the tensor (optimizers update parameters through data() in place; this
  // rebinds it, e.g. when loading a state dict or moving to another device).
  void set_data(Tensor data);

  bool requires_grad() const;
  void set_requires_grad(bool requires_grad);  // leaves only
  bool is_leaf() const;

  bool has_grad() const;
  const Tensor& grad() const;  // throws when there is none
  void set_grad(Tensor grad);
  void add_grad(const Tensor& grad);  // accumulates (shape must equal data's)
  // The same for a gradient the caller gives up (an op's fresh result): a leaf's first
  // gradient that nothing else refers to becomes its own without a copy.
  void add_grad(Tensor&& grad);
  void zero_grad();  // drops the gradient

  // Gradient of a scalar output (seed 1) or of any output given its grad_output.
  void backward(bool retain_graph = false);
  void backward(const Tensor& grad_output, bool retain_graph = false);

  // The same data, cut from the graph.
  Variable detach() const { return Variable(data(), false); }

  void register_grad_hook(GradHook hook);  // leaves that require grad only
  void clear_grad_hooks();

  // Shape helpers forwarding to data().
  const Shape& shape() const { return data().shape(); }
  std::int64_t dim() const { return data().dim(); }
  std::int64_t size(std::int64_t d) const { return data().size(d); }
  std::int64_t numel() const { return data().numel(); }
  DType dtype() const { return data().dtype(); }
  Device device() const { return data().device(); }
  double item() const { return data().item(); }

  // Identity: true when both handles name the same variable.
  bool is(const Variable& other) const { return impl_ == other.impl_; }
  const void* id() const { return impl_.get(); }

 private:
  struct Impl;
  friend struct BackwardPass;
  std::shared_ptr<Impl> impl_;
};

// Disables graph recording in its scope (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
bool grad_enabled();

// Enables it in its scope, under an outer NoGradGuard too (checkpoint.h's recomputation,
// which runs inside a backward).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace dtrain
