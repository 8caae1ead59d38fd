#include "dtrain/autograd/variable.h"

#include "autograd/op_name.h"
#include "autograd/recompute_engine.h"
#include "dtrain/core/trace.h"
#include "dtrain/autograd/split_backward.h"
#include "dtrain/tensor/ops.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

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
thread_local detail::LeafRecorder* t_leaf_recorder = nullptr;
}  // namespace

bool grad_enabled() { return t_grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }
EnableGradGuard::EnableGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = previous_; }

namespace detail {

LeafRecorder::LeafRecorder() : previous_(t_leaf_recorder) { t_leaf_recorder = this; }
LeafRecorder::~LeafRecorder() { t_leaf_recorder = previous_; }

void LeafRecorder::see(const std::vector<Variable>& inputs) {
  for (const Variable& v : inputs) {
    if (!v.requires_grad()) continue;
    // Without grad mode nothing made inside the function requires grad: this came from a
    // graph outside it, which the recomputed graph would join and a nested backward free.
    DTRAIN_CHECK(v.is_leaf(),
                 "activation_checkpoint: the function read a variable that another op computed with a graph, outside the "
                 "function; only its input x and leaves (parameters) may carry gradients into it: pass the value "
                 "through x, or compute it inside the function");
    if (seen_.insert(v.id()).second) leaves_.push_back(v);
  }
}

}  // namespace detail

Variable::Variable(Tensor data, bool requires_grad) : impl_(std::make_shared<Impl>()) {
  check_defined(data, "Variable");
  DTRAIN_CHECK(!requires_grad || is_floating(data.dtype()), "Variable: only floating tensors can require grad, got {}",
               dtype_name(data.dtype()));
  impl_->data = std::move(data);
  impl_->requires_grad = requires_grad;
}

Variable::Variable(Tensor data, std::vector<Variable> inputs, GradFn grad_fn) : impl_(std::make_shared<Impl>()) {
  impl_->data = std::move(data);
  bool any = t_grad_enabled && std::any_of(inputs.begin(), inputs.end(),
                                           [](const Variable& v) { return v.defined() && v.requires_grad(); });
  if (any) {
    impl_->requires_grad = true;
    impl_->inputs = std::move(inputs);
    impl_->grad_fn = std::move(grad_fn);
    if (trace::recording()) trace::since_mark(detail::op_name(impl_->grad_fn), "op forward");
  } else if (!t_grad_enabled && t_leaf_recorder != nullptr) {
    t_leaf_recorder->see(inputs);
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
  DTRAIN_CHECK(grad.shape() == data().shape(), "add_grad: gradient shape {} != data shape {}", shape_str(grad.shape()),
               shape_str(data().shape()));
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
  const bool sole = grad.defined() && grad.storage().use_count() == 1 && grad.is_contiguous() && grad.offset() == 0 &&
                    grad.nbytes() == grad.storage()->nbytes();
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

// What the input pass of a split backward keeps for the weight pass, in the walk's order:
// each node with weight-side inputs (its output's gradient kept, and which inputs W
// computes), and each weight-derived node (its gradient arrives in W).
struct DeferredWeightGradients::State {
  struct Kept {
    Variable node;
    Tensor grad_output;                // undefined for a weight-derived node
    std::vector<std::size_t> weights;  // the inputs W computes (indices); all of them when empty
  };
  std::vector<Kept> nodes;
  std::unordered_map<const void*, Tensor> grads;  // weight-derived nodes' gradients that B produced
  std::unordered_map<const void*, int> pending;   // per weight: its edges whose gradient is still to add
  bool ran = false;
};

// One run of backward(): topological order by iterative DFS, then a reverse walk. Each
// leaf counts the graph edges into it, so its hooks fire exactly when the last
// contribution has been added, while the rest of the walk continues; that is the moment
// the data-parallel reducer can start communicating that gradient.
//
// A split backward's input pass (split_backward.h) runs the same walk with `deferred`, the
// weights. The weight side of the graph is the weights and every node computed from them
// alone (a weight reshaped or transposed, say). A node that takes weight-side inputs runs
// with them marked as not requiring grad and is kept for the weight pass, which runs it
// again with every other input so marked, then walks the weight side. A weight-side
// gradient that a node computed anyway counts where it was computed, never twice.
struct BackwardPass {
  using Impl = Variable::Impl;
  using State = DeferredWeightGradients::State;

  // `hooks` false: a checkpoint's nested backward (recompute_engine.h), whose caller's pass
  // fires them.
  static void run(Variable& root, const Tensor& seed, bool retain_graph,
                  const std::unordered_set<const void*>* deferred = nullptr, State* keep = nullptr, bool hooks = true) {
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
    // The weight side: the weights, and each node whose inputs that require grad all are.
    std::unordered_set<const Impl*> weight_side;
    if (deferred != nullptr) {
      for (const auto& impl : order) {
        bool side = deferred->count(impl.get()) > 0;
        if (impl->grad_fn) {
          side = false;
          for (const Variable& in : impl->inputs) {
            if (in.impl_ == nullptr || !in.impl_->requires_grad) continue;
            side = weight_side.count(in.impl_.get()) > 0;
            if (!side) break;
          }
        }
        if (side) weight_side.insert(impl.get());
      }
    }
    // A plain backward() has no weight side: no lookups on its path.
    const auto on_weight_side = [&](const Impl* in) { return !weight_side.empty() && weight_side.count(in) > 0; };

    std::unordered_map<Impl*, Tensor> grads;  // gradients of non-leaf nodes
    auto fire_if_ready = [&](Variable& leaf) {
      auto it = pending_leaf_edges.find(leaf.impl_.get());
      if (it != pending_leaf_edges.end() && --it->second == 0 && hooks) {
        for (auto& hook : leaf.impl_->hooks) hook(leaf);
      }
    };

    if (root.impl_->grad_fn) {
      grads[root.impl_.get()] = seed;
    } else {
      root.add_grad(seed);
      if (hooks) {
        for (auto& hook : root.impl_->hooks) hook(root);
      }
      return;
    }

    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Impl* node = it->get();
      if (!node->grad_fn) continue;
      if (on_weight_side(node)) {
        // Its gradient arrives in W (or partly here, from an op that computed it anyway).
        Variable kept;
        kept.impl_ = *it;
        keep->nodes.push_back({std::move(kept), Tensor(), {}});
        if (auto g = grads.find(node); g != grads.end()) {
          keep->grads[node] = std::move(g->second);
          grads.erase(g);
        }
        continue;
      }
      auto g = grads.find(node);
      if (g == grads.end()) continue;  // no gradient reached this node
      Tensor grad_output = std::move(g->second);
      grads.erase(g);
      // Its weight-side inputs (each with its edges): hidden from its grad_fn, a weight's
      // gradient set aside so that one the op computes anyway shows.
      std::vector<std::pair<Impl*, std::vector<std::size_t>>> hidden;
      for (std::size_t i = 0; i < node->inputs.size(); ++i) {
        Impl* in = node->inputs[i].impl_.get();
        if (in == nullptr || !on_weight_side(in)) continue;
        auto h = std::find_if(hidden.begin(), hidden.end(), [&](const auto& e) { return e.first == in; });
        if (h == hidden.end()) hidden.push_back({in, {i}});
        else h->second.push_back(i);
      }
      std::vector<Tensor> set_aside;
      for (auto& [in, edges] : hidden) {
        in->requires_grad = false;
        set_aside.push_back(std::move(in->grad));
        in->grad = Tensor();
      }
      // grad_fn adds each input's gradient with add_grad; a non-leaf input's is then
      // moved into `grads` until that input's own turn in the walk.
      {
        std::optional<trace::Span> span;
        if (trace::recording()) span.emplace(detail::op_name(node->grad_fn), "op backward");
        node->grad_fn(node->inputs, grad_output);
      }
      std::vector<std::size_t> later;
      for (std::size_t h = 0; h < hidden.size(); ++h) {
        auto& [in, edges] = hidden[h];
        Variable& input = node->inputs[edges.front()];
        in->requires_grad = true;
        Tensor computed = std::move(in->grad);
        in->grad = std::move(set_aside[h]);
        if (!computed.defined()) {
          later.insert(later.end(), edges.begin(), edges.end());
        } else if (in->grad_fn) {
          // Computed anyway: a weight-derived node's share, carried to W.
          Tensor& slot = keep->grads[in];
          slot = slot.defined() ? add(slot, computed) : computed;
        } else {
          // Computed anyway: it counts here, as backward() would add it.
          input.add_grad(std::move(computed));
          for (std::size_t e = 0; e < edges.size(); ++e) fire_if_ready(input);
        }
      }
      for (auto& input : node->inputs) {
        Impl* in = input.impl_.get();
        if (in == nullptr || !in->requires_grad || on_weight_side(in)) continue;
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
      if (!later.empty()) {
        // W needs the node's function and inputs, not its output: a stand-in holds those,
        // so that the output's memory goes when backward() would let it go (between B and
        // W a micro-batch keeps its weight ops' inputs and output gradients, no more).
        auto stand_in = std::make_shared<Impl>();
        stand_in->requires_grad = true;
        stand_in->grad_fn = std::move(node->grad_fn);
        stand_in->inputs = std::move(node->inputs);
        node->inputs.clear();
        node->grad_fn = nullptr;
        Variable kept;
        kept.impl_ = std::move(stand_in);
        keep->nodes.push_back({std::move(kept), std::move(grad_output), std::move(later)});
      } else if (!retain_graph) {
        node->inputs.clear();
        node->grad_fn = nullptr;
      }
    }
    if (keep != nullptr) {
      for (const auto& [leaf, edges] : pending_leaf_edges) {
        if (deferred->count(leaf) > 0 && edges > 0) keep->pending[leaf] = edges;
      }
    }
  }

  static DeferredWeightGradients split(Variable& root, const Tensor& seed,
                                       const std::unordered_set<const void*>& weights) {
    DeferredWeightGradients deferred;
    run(root, seed, /*retain_graph=*/false, &weights, deferred.state_.get());
    return deferred;
  }

  // The weight pass: the kept nodes in the input pass's order, each with only its
  // weight-side inputs visible; weight-derived nodes pass their gradient on as in B.
  static void run_weights(State& state) {
    for (auto& kept : state.nodes) {
      Impl* node = kept.node.impl_.get();
      Tensor grad_output = std::move(kept.grad_output);
      if (!grad_output.defined()) {  // a weight-derived node
        auto g = state.grads.find(node);
        if (g != state.grads.end()) {
          grad_output = std::move(g->second);
          state.grads.erase(g);
        }
      }
      if (grad_output.defined()) {
        std::vector<Impl*> hidden;
        if (!kept.weights.empty()) {
          for (auto& input : node->inputs) {
            Impl* in = input.impl_.get();
            const bool visible = std::any_of(kept.weights.begin(), kept.weights.end(),
                                             [&](std::size_t i) { return node->inputs[i].impl_.get() == in; });
            if (in == nullptr || visible || !in->requires_grad) continue;
            in->requires_grad = false;
            hidden.push_back(in);
          }
        }
        {
          std::optional<trace::Span> span;
          if (trace::recording()) span.emplace(detail::op_name(node->grad_fn), "op backward");
          node->grad_fn(node->inputs, grad_output);
        }
        for (Impl* in : hidden) in->requires_grad = true;
        for (std::size_t i = 0; i < node->inputs.size(); ++i) {
          Variable& input = node->inputs[i];
          Impl* in = input.impl_.get();
          if (in == nullptr || !in->requires_grad) continue;
          const bool visible =
              kept.weights.empty() || std::find(kept.weights.begin(), kept.weights.end(), i) != kept.weights.end();
          if (!visible) continue;
          if (in->grad_fn) {
            if (in->grad.defined()) {
              Tensor& slot = state.grads[in];
              slot = slot.defined() ? add(slot, in->grad) : in->grad;
              in->grad = Tensor();
            }
          } else if (auto p = state.pending.find(in); p != state.pending.end() && --p->second == 0) {
            for (auto& hook : in->hooks) hook(input);
          }
        }
      }
      node->inputs.clear();
      node->grad_fn = nullptr;
      kept = {};
    }
    state.nodes.clear();
    state.grads.clear();
  }
};

DeferredWeightGradients::DeferredWeightGradients() : state_(std::make_unique<State>()) {}
DeferredWeightGradients::~DeferredWeightGradients() = default;
DeferredWeightGradients::DeferredWeightGradients(DeferredWeightGradients&&) noexcept = default;
DeferredWeightGradients& DeferredWeightGradients::operator=(DeferredWeightGradients&&) noexcept = default;

void DeferredWeightGradients::run() {
  DTRAIN_CHECK(state_ != nullptr && !state_->ran, "DeferredWeightGradients::run: the weight pass already ran");
  state_->ran = true;
  BackwardPass::run_weights(*state_);
}

bool DeferredWeightGradients::pending() const { return state_ != nullptr && !state_->ran && !state_->nodes.empty(); }

DeferredWeightGradients backward_inputs(Variable& output, const Tensor& grad_output,
                                        const std::vector<Variable>& weights) {
  DTRAIN_CHECK(output.requires_grad(), "backward_inputs: the output does not require grad (no parameter reached it)");
  DTRAIN_CHECK(grad_output.shape() == output.shape(), "backward_inputs: grad_output shape {} != output shape {}",
               shape_str(grad_output.shape()), shape_str(output.shape()));
  std::unordered_set<const void*> ids;
  for (const Variable& w : weights) {
    DTRAIN_CHECK(w.is_leaf() && w.requires_grad(), "backward_inputs: a weight must be a leaf that requires grad");
    ids.insert(w.id());
  }
  return BackwardPass::split(output, grad_output, ids);
}

namespace detail {

void backward_without_hooks(Variable& output, const Tensor& grad_output) {
  DTRAIN_CHECK(grad_output.shape() == output.shape(), "backward: grad_output shape {} != output shape {}",
               shape_str(grad_output.shape()), shape_str(output.shape()));
  BackwardPass::run(output, grad_output, /*retain_graph=*/false, nullptr, nullptr, /*hooks=*/false);
}

}  // namespace detail

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
