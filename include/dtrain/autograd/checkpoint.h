// Activation checkpointing, as PyTorch's torch.utils.checkpoint (its non-reentrant form):
// activation_checkpoint(fn, x) is fn(x), but backward keeps only x, not the activations fn makes. The
// forward runs fn without a graph; the backward runs fn again on x, with a graph and from
// the random numbers the first run drew, and backpropagates through that. Memory for time:
// one more forward of fn per backward.
//
//   Variable y = activation_checkpoint([&](const Variable& h) { return (*block)(h); }, x, &model->dropout_generator());
//
// - Parameters: the leaves fn reads (found as the forward runs) are inputs of the checkpoint's
//   node. Their gradients add up as without it, and their hooks (data parallelism's buckets,
//   ZeRO-3's frees) fire once per backward, after the last contribution, also when other
//   checkpoints or ops outside use them too.
// - Every other value that carries a gradient reaches fn through x: one it captured that an
//   op outside computed with a graph throws (its gradient would be lost).
// - Random numbers: `generator` is the one fn draws from (nullptr: the default generator);
//   its state is restored for the recomputation and put back after it, so dropout drops the
//   same units. The autocast dtype (autocast.h) is the forward's too.
// - Module forward hooks (tensor parallelism's collectives, ZeRO-3's gathers) run again in
//   the recomputation, as fn calls the modules again; recomputing() tells them it is one.
// - The split backward (split_backward.h) recomputes in each of its two passes.
// - Without grad mode it is fn(x). fn must compute the same thing twice: no effect that must
//   happen once (batch norm's running statistics would move twice).
#pragma once

#include "dtrain/autograd/variable.h"
#include "dtrain/tensor/ops.h"

#include <functional>

namespace dtrain {

// `generator` must outlive the backward.
Variable activation_checkpoint(const std::function<Variable(const Variable&)>& fn, const Variable& x,
                               Generator* generator = nullptr);

// Whether a checkpoint's backward is running its function again on this thread: a forward
// hook that prepares the next forward (ZeRO-3's prefetch) has nothing to prepare then.
bool recomputing();

}  // namespace dtrain
