// Optimizer: updates parameters from their gradients. Optimizers see parameters, never
// modules, so the same optimizer serves a whole model, a data-parallel replica or one
// pipeline stage. Subclasses write only the update rule; this class owns the learning
// rate, the step counts and the per-parameter buffers, and saves them for checkpoints.
#pragma once

#include "dtrain/autograd/variable.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  // params: distinct, defined, floating; lr >= 0.
  explicit Optimizer(std::vector<Variable> params, double lr);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient, in place; parameters without one
  // (unused this step) are skipped and keep their buffers unchanged, as in PyTorch.
  virtual void step() = 0;
  void zero_grad();  // drops every parameter's gradient
  // A new optimizer of the same kind and options, at the current learning rate, over
  // other parameters and with fresh state: a parameter server builds one per shard it owns.
  // SGD and Adam/AdamW update each element from its own gradient and buffers alone, so the
  // shards' updates together are this optimizer's update of the whole model, provided each
  // slice keeps its parameter's rank (< 2 or not), which their option to skip weight decay
  // on 1-D parameters reads. Optimizers whose update depends on a whole tensor (LARS's and
  // LAMB's trust ratios) throw instead.
  virtual std::unique_ptr<Optimizer> rebind(std::vector<Variable> params) const = 0;

  // How slices of whole tensors (sharded data parallelism's chunks: a slice per rank) give
  // the whole tensors' norms that LARS and LAMB read. `tensor_of[i]` is the whole tensor
  // (of `tensors`) that parameter i is a slice of; `sum_over_ranks` adds an f64 CPU tensor of
  // shape [tensors, k] up in place over the ranks that hold the other slices (collective:
  // every rank calls it once per step, with the same shape).
  struct SliceNorms {
    std::vector<std::size_t> tensor_of;
    std::size_t tensors = 0;
    std::function<void(Tensor&)> sum_over_ranks;
  };
  // rebind() over slices of whole tensors. The default is rebind() (rules that update each
  // element from its own gradient and buffers need no norms); LARS and LAMB take their
  // norms over the whole tensors through `norms`.
  virtual std::unique_ptr<Optimizer> rebind_slices(std::vector<Variable> params, SliceNorms norms) const {
    return rebind(std::move(params));
  }

  double lr() const { return lr_; }
  void set_lr(double lr);  // e.g. from an LrSchedule before each step
  const std::vector<Variable>& params() const { return params_; }
  std::int64_t steps() const { return steps_; }  // step() calls so far

  // Checkpoint state: "lr" (f64 scalar), "steps" (i64 scalar), "updates" (i64, updates
  // applied to each parameter) and each buffer a subclass keeps, as "<buffer>.<param
  // index>" (only the buffers created so far). The tensors are copies: a snapshot stays
  // valid while training continues.
  virtual NamedTensors state() const;
  // state() without copying the buffers: they are the optimizer's own, valid and unchanged
  // until the next step() (a checkpoint copies them into memory it reuses).
  NamedTensors state_view() const;
  // Restores what state() returned for an optimizer of the same kind over parameters of
  // the same shapes (buffers are converted to each parameter's dtype and device). Throws
  // on a missing, unknown, repeated or mis-shaped entry and then leaves this unchanged.
  virtual void load_state(const NamedTensors& state);

 protected:
  // Registers a per-parameter buffer (e.g. "momentum_buffer") and returns its id. Every
  // slot starts undefined; the subclass creates it on the parameter's first update.
  std::size_t add_buffer(std::string name);
  Tensor& buffer(std::size_t id, std::size_t param) { return buffers_[id].slots[param]; }

  // The body of step(): counts the step, then, under NoGradGuard, calls
  // update(i, p, grad) for each parameter i that has a gradient, with p its data (sharing
  // storage, so in-place ops on p update the parameter). updates(i) already includes the
  // update in progress.
  template <class F>
  void for_each_update(F&& update);
  std::int64_t updates(std::size_t param) const { return updates_[param]; }

 private:
  struct Buffer {
    std::string name;
    std::vector<Tensor> slots;  // one per parameter
  };

  std::vector<Variable> params_;
  double lr_;
  std::int64_t steps_ = 0;
  std::vector<std::int64_t> updates_;
  std::vector<Buffer> buffers_;
};

template <class F>
void Optimizer::for_each_update(F&& update) {
  NoGradGuard no_grad;
  ++steps_;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].has_grad()) continue;
    ++updates_[i];
    Tensor p = params_[i].data();
    update(i, p, params_[i].grad());
  }
}

}  // namespace dtrain::optim
