// A backward pass split in two, for zero-bubble pipeline schedules (Qi et al. 2023, "Zero
// Bubble Pipeline Parallelism"): the input pass ("B") computes every gradient except those
// of the given weights, in particular the gradient of a stage's input that the previous
// stage waits for; the weight pass ("W"), run whenever the caller likes later, computes the
// weights' gradients from what B kept: each node that takes a weight keeps its inputs and
// the gradient of its output until then. Between the two passes a weight's gradient is
// what it was before B (untouched), and its gradient-ready hooks (DataParallel's reducer)
// fire in W, once its last contribution is in.
//
//   Variable x(received_activation, /*requires_grad=*/true);
//   Variable loss = ...stage(x)...;
//   DeferredWeightGradients w = backward_inputs(loss, seed, stage->parameters());  // B
//   send(x.grad());
//   ...                                     // other micro-batches' passes
//   w.run();                                // W: the weights' gradients, hooks fire
//
// Together the two passes add exactly what backward(seed) adds (the same operations on the
// same tensors, each weight's contributions in the same order). Nothing changes for code
// that calls backward(). An op whose backward ignores the request to skip a weight (it
// computes that gradient anyway) has it counted in B instead of W, never twice.
#pragma once

#include "dtrain/autograd/variable.h"

#include <memory>
#include <vector>

namespace dtrain {

class DeferredWeightGradients {
 public:
  DeferredWeightGradients();
  ~DeferredWeightGradients();  // without run(): the kept graph is freed, no gradient added
  DeferredWeightGradients(DeferredWeightGradients&&) noexcept;
  DeferredWeightGradients& operator=(DeferredWeightGradients&&) noexcept;

  // The weight pass: adds the weights' gradients into what they hold and fires each
  // weight's hooks once its contributions are in; then frees what B kept. Throws when it
  // already ran.
  void run();
  // Whether a weight pass is still to run (false after run(), or when B reached no weight).
  bool pending() const;

 private:
  friend struct BackwardPass;
  struct State;
  std::unique_ptr<State> state_;
};

// The input pass of `output`'s backward with gradient `grad_output` (the shape of
// `output`), leaving the gradients of `weights` (leaves that require grad) to the returned
// weight pass. The graph is freed as by backward(), except what the weight pass needs.
DeferredWeightGradients backward_inputs(Variable& output, const Tensor& grad_output,
                                        const std::vector<Variable>& weights);

}  // namespace dtrain
