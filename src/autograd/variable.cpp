#include "dtrain/autograd/variable.h"

#include "dtrain/tensor/ops.h"

#include <algorithm>
#include <unordered_map>

namespace dtrain {

struct Variable::Impl {
  Tensor data;
  Tensor grad;
  bool requires_grad = false;
  std::vector<Variable> inputs;  // empty for leaves and freed nodes
  GradFn grad_fn;                // empty for leaves
  std::vector<GradHook> hooks;
};

namespace {
thread_local bool t_grad_enabled = true;
}

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

Variable::Variable(Tensor data, bool requires_grad) : impl_(std::make_shared<Impl>()) {
  check_defined(data, "Variable");
  DTRAIN_CHECK(!requires_grad || is_floating(data.dtype()),
               "Variable: only floating tensors can require grad, got {}", dtype_name(data.dtype()));
  impl_->data = std::move(data);
  impl_->requires_grad = requires_grad;
}

Variable::Variable(Tensor data, std::vector<Variable> inputs, GradFn grad_fn) : impl_(std::make_shared<Impl>()) {
  impl_->data = std::move(data);
  bool any = t_grad_enabled && std::any_of(inputs.begin(), inputs.end(), [](const Variable& v) {
               return v.defined() && v.requires_grad();
             });
  if (any) {
    impl_->requires_grad = true;
    impl_->inputs = std::move(inputs);
    impl_->grad_fn = std::move(grad_fn);
  }
}

const Tensor& Variable::data() const {
  DTRAIN_CHECK(impl_ != nullptr, "Variable::data: the variable is undefined");
  return impl_->data;
}

void Variable::set_data(Tensor data) {
  DTRAIN_CHECK(impl_ != nullptr, "Variable::set_data: the variable is undefined");
  impl_->data = std::move(data);
}

bool Variable::requires_grad() const { return impl_ && impl_->requires_grad; }

void Variable::set_requires_grad(bool requires_grad) {
  DTRAIN_CHECK(is_leaf(), "set_requires_grad: only leaves can change requires_grad");
  impl_->requires_grad = requires_grad;
}

bool Variable::is_leaf() const { return impl_ && !impl_->grad_fn; }

bool Variable::has_grad() const { return impl_ && impl_->grad.defined(); }

const Tensor& Variable::grad() const {
  DTRAIN_CHECK(has_grad(), "Variable::grad: no gradient (backward not run, or the variable is unused)");
  return impl_->grad;
}

void Variable::set_grad(Tensor grad) {
  DTRAIN_CHECK(!grad.defined() || grad.shape() == data().shape(), "set_grad: gradient shape {} != data shape {}",
               shape_str(grad.shape()), shape_str(data().shape()));
  impl_->grad = std::move(grad);
}

void Variable::add_grad(const Tensor& grad) {
  DTRAIN_CHECK(grad.shape() == data().shape(), "add_grad: gradient shape {} != data shape {}",
               shape_str(grad.shape()), shape_str(data().shape()));
  // A gradient passed in may be shared (add() hands the same tensor to both inputs).
  // Leaves own theirs (a copy, accumulated in place; optimizers and all-reduce write
  // it); intermediate nodes keep a reference and accumulate out of place, which saves
  // an activation-sized copy per op.
  if (!impl_->grad.defined()) {
    impl_->grad = is_leaf() ? grad.clone() : grad;
  } else if (is_leaf()) {
    add_(impl_->grad, grad);
  } else {
    impl_->grad = add(impl_->grad, grad);
  }
}

void Variable::add_grad(Tensor&& grad) {
  // As PyTorch's AccumulateGrad steals a gradient no one else holds: one parameter-sized
  // copy (and its peak memory) fewer per step. Only a whole, contiguous storage that this
  // tensor alone refers to: a view into another tensor's storage, or a tensor also handed
  // to another input (add()), is copied as before.
  const bool sole = grad.defined() && grad.storage().use_count() == 1 && grad.is_contiguous() &&
                    grad.offset() == 0 && grad.nbytes() == grad.storage()->nbytes();
  if (is_leaf() && !impl_->grad.defined() && sole && grad.shape() == data().shape()) {
    impl_->grad = std::move(grad);
    return;
  }
  add_grad(static_cast<const Tensor&>(grad));
}

void Variable::zero_grad() { impl_->grad = Tensor(); }

void Variable::register_grad_hook(GradHook hook) {
  DTRAIN_CHECK(is_leaf() && requires_grad(), "register_grad_hook: only leaves that require grad take hooks");
  impl_->hooks.push_back(std::move(hook));
}

void Variable::clear_grad_hooks() { impl_->hooks.clear(); }

// One run of backward(): topological order by iterative DFS, then a reverse walk. Each
// leaf counts the graph edges into it, so its hooks fire exactly when the last
// contribution has been added, while the rest of the walk continues; that is the moment
// the data-parallel reducer can start communicating that gradient.
struct BackwardPass {
  static void run(Variable& root, const Tensor& seed, bool retain_graph) {
    using Impl = Variable::Impl;
    // Post-order (inputs before consumers). Owning pointers: freeing a node's inputs
    // below would otherwise destroy nodes that are still to be visited.
    std::vector<std::shared_ptr<Impl>> order;
    std::unordered_map<Impl*, int> pending_leaf_edges;
    std::unordered_map<Impl*, bool> visited;
    std::vector<std::pair<std::shared_ptr<Impl>, std::size_t>> stack{{root.impl_, 0}};
    visited[root.impl_.get()] = true;
    while (!stack.empty()) {
      auto& top = stack.back();
      Impl* node = top.first.get();
      if (top.second < node->inputs.size()) {
        const std::shared_ptr<Impl>& child = node->inputs[top.second++].impl_;
        if (child == nullptr || !child->requires_grad) continue;
        if (!child->grad_fn) ++pending_leaf_edges[child.get()];
        if (!visited[child.get()]) {
          visited[child.get()] = true;
          stack.emplace_back(child, 0);
        }
      } else {
        order.push_back(std::move(top.first));
        stack.pop_back();
      }
    }

    std::unordered_map<Impl*, Tensor> grads;  // gradients of non-leaf nodes
    auto fire_if_ready = [&](Variable& leaf) {
      auto it = pending_leaf_edges.find(leaf.impl_.get());
      if (it != pending_leaf_edges.end() && --it->second == 0) {
        for (auto& hook : leaf.impl_->hooks) hook(leaf);
      }
    };

    if (root.impl_->grad_fn) {
      grads[root.impl_.get()] = seed;
    } else {
      root.add_grad(seed);
      for (auto& hook : root.impl_->hooks) hook(root);
      return;
    }

    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Impl* node = it->get();
      if (!node->grad_fn) continue;
      auto g = grads.find(node);
      if (g == grads.end()) continue;  // no gradient reached this node
      Tensor grad_output = std::move(g->second);
      grads.erase(g);
      // grad_fn adds each input's gradient with add_grad; a non-leaf input's is then
      // moved into `grads` until that input's own turn in the walk.
      node->grad_fn(node->inputs, grad_output);
      for (auto& input : node->inputs) {
        Impl* in = input.impl_.get();
        if (in == nullptr || !in->requires_grad) continue;
        if (in->grad_fn) {
          if (in->grad.defined()) {
            auto& slot = grads[in];
            if (!slot.defined()) slot = in->grad;
            else slot = add(slot, in->grad);
            in->grad = Tensor();
          }
        } else {
          fire_if_ready(input);
        }
      }
      if (!retain_graph) {
        node->inputs.clear();
        node->grad_fn = nullptr;
      }
    }
  }
};

void Variable::backward(bool retain_graph) {
  DTRAIN_CHECK(numel() == 1, "backward: output has shape {}; pass a grad_output for non-scalar outputs",
               shape_str(shape()));
  backward(Tensor::ones(shape(), data().options()), retain_graph);
}

void Variable::backward(const Tensor& grad_output, bool retain_graph) {
  DTRAIN_CHECK(requires_grad(), "backward: the output does not require grad (no parameter reached it)");
  DTRAIN_CHECK(grad_output.shape() == shape(), "backward: grad_output shape {} != output shape {}",
               shape_str(grad_output.shape()), shape_str(shape()));
  BackwardPass::run(*this, grad_output, retain_graph);
}

}  // namespace dtrain
