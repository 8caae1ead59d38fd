// Tensor parallelism applied to a model: a plan names the model's modules (paths as in
// named_parameters, "*" standing for one path component) and how each is split over the
// ranks of a tensor-parallel group, as PyTorch's parallelize_module takes a plan of
// ColwiseParallel, RowwiseParallel and SequenceParallel styles (Megatron-LM's column- and
// row-parallel layers). parallelize() cuts each rank's slices out of the whole weights the
// model was built with (so a tensor-parallel model starts identical to one process's, built
// from the same seed) and puts the collectives on the modules' inputs and outputs (forward
// hooks, Module::ForwardHooks): the model's own code is unchanged.
//
//   dist::TensorParallelPlan plan = {
//       {"*.attn", dist::ParallelStyle::PrepareInput},
//       {"*.attn.c_attn", dist::ParallelStyle::Colwise, {d, d, d}, head_dim},  // q, k, v by heads
//       {"*.attn.c_proj", dist::ParallelStyle::Rowwise},
//       ...};
//   auto tp = dist::parallelize(*model, mesh.group("tp"), plan, {.sequence_parallel = true});
//   Variable loss = tp->loss()(model->forward(tokens), targets);  // vocabulary-parallel
//
// Strategies apply it themselves when the mesh has a tp dimension (Strategy::set_tensor_parallel,
// from the factory's StrategyHints::tensor_parallel_plan), before they wrap or cut the model;
// docs/TENSOR_PARALLEL.md has the layouts and their cost.
#pragma once

#include "dtrain/comm/communicator.h"
#include "dtrain/layers/module.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

enum class ParallelStyle {
  // The module's input enters a tensor-parallel region: forward as is, backward the sum of
  // the ranks' gradients; under sequence parallelism the sequence shards all-gathered
  // (backward: reduce-scattered).
  PrepareInput,
  // Its own "weight" (out, in) and "bias" (out) split along the output features: the
  // output is this rank's columns. `segments` (sizes adding up to out: a fused q, k, v
  // projection) are split each, the rank's pieces side by side; every piece is a whole
  // number of `granule`s (a head's width), or the plan is refused.
  Colwise,
  // An nn::Linear's weight split along the input features (the input is this rank's
  // columns); the output is the sum of the ranks' (all-reduce; under sequence parallelism a
  // reduce-scatter to this rank's sequence shard), then the bias.
  Rowwise,
  // An nn::Embedding's rows (the vocabulary) split as evenly as they go; ids another rank
  // holds give zeros here, and the output is the ranks' sum (all-reduce).
  VocabEmbedding,
  // Its own "weight" (V, d), an output projection, split by rows as VocabEmbedding splits
  // (a tied weight is split once): the output is this rank's logits, for loss().
  VocabOutput,
  // A module on the residual stream (a norm): replicated; under sequence parallelism it
  // sees this rank's sequence shard, so its parameters' gradients are summed over the group.
  SequenceNorm,
  // Under sequence parallelism, the module's (replicated) output cut to this rank's
  // sequence shard (backward: all-gathered); otherwise nothing.
  ShardSequence,
};

struct PlanEntry {
  std::string pattern;  // a module path; "*" matches one component ("*.mlp.c_fc")
  ParallelStyle style;
  std::vector<std::int64_t> segments = {};  // Colwise only
  std::int64_t granule = 1;                 // Colwise only
};
using TensorParallelPlan = std::vector<PlanEntry>;

struct TensorParallelOptions {
  bool sequence_parallel = false;  // Korthikanti et al. 2022: norms, dropout and residuals on sequence shards
};

// A parameter split over the group: this rank holds the ranges `pieces` ({begin, size}) of
// dimension `dim` of the whole (shape `whole`), side by side (several for a fused q, k, v).
struct ParameterSlice {
  int dim = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
  Shape whole;
};

// What parallelize() did to a model, for the strategies and the loss.
class TensorParallel {
 public:
  const CommunicatorPtr& group() const { return group_; }
  bool sequence_parallel() const { return options_.sequence_parallel; }
  // Parameters every rank of the group holds whole (their gradients agree once
  // finish_gradients() ran): the gradient norm counts them on the group's first rank only.
  const std::vector<Variable>& replicated() const { return replicated_; }
  // Split parameters by name (in the model parallelize() was given), with their slices.
  const std::vector<std::pair<std::string, ParameterSlice>>& slices() const { return slices_; }
  // The slice of `param`, or null when it is held whole.
  const ParameterSlice* slice_of(const Variable& param) const;
  // Parameters whose gradient each rank holds a part of (sequence parallelism's norms and
  // row-parallel biases).
  const std::vector<Variable>& partial() const { return partial_; }
  // After the last backward of an update: sums those gradients over the group. Collective.
  void finish_gradients() { finish_gradients(partial_); }
  // The same for the variables an optimizer steps in their place (sharded data
  // parallelism's slices of them, laid out alike on every rank of the group).
  void finish_gradients(const std::vector<Variable>& params);
  // The vocabulary-parallel mean cross-entropy of the model's output (needs a VocabOutput
  // module): (logits (B, T, V_r), targets (B, T)) -> loss.
  std::function<Variable(const Variable&, const Tensor&)> loss() const;
  std::int64_t vocab_begin() const { return vocab_begin_; }
  // While on, the VocabOutput module's output is the whole vocabulary's logits, gathered
  // from the ranks (to sample from; not differentiable). Every rank of the group must run
  // the same forwards (the same prompt and seed).
  void gather_output(bool on) { *gather_output_ = on; }

 private:
  friend std::shared_ptr<TensorParallel> parallelize(nn::Module&, CommunicatorPtr, const TensorParallelPlan&,
                                                     TensorParallelOptions);
  CommunicatorPtr group_;
  TensorParallelOptions options_;
  std::vector<Variable> replicated_, partial_;
  std::vector<std::pair<std::string, ParameterSlice>> slices_;
  std::map<const void*, std::size_t> slice_index_;  // a sliced parameter's Variable -> its entry in slices_
  std::int64_t vocab_begin_ = -1;
  std::shared_ptr<bool> gather_output_ = std::make_shared<bool>(false);
  std::vector<std::pair<nn::Module*, std::shared_ptr<nn::Module::ForwardHooks>>> hooks_;
};

// Splits `model` over `group` by `plan` in place (collective only in the forward and backward
// passes it changes). Every pattern must match a module and every module must suit its
// style, else an error names the pattern, the module and the reason (heads that do not
// divide by the group, say). Call it once, before building the optimizer.
std::shared_ptr<TensorParallel> parallelize(nn::Module& model, CommunicatorPtr group, const TensorParallelPlan& plan,
                                            TensorParallelOptions options = {});

}  // namespace dtrain::dist
