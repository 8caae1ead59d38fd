// The collectives of tensor and sequence parallelism as differentiable ops (Megatron-LM's
// mappings; Korthikanti et al. 2022 for the sequence-parallel pairs), over the ranks of one
// tensor-parallel group. Each forward collective has its transpose as backward, so a layer
// written with them is differentiated like any other. `module` names the layer for
// CommDebugMode and the trace. The sequence is dimension 1 of (B, T, ...) activations; its
// length must divide by the group's size where it is split.
#pragma once

#include "dtrain/autograd/variable.h"
#include "dtrain/comm/communicator.h"

#include <cstdint>
#include <string>

namespace dtrain::dist {

// Forward: x itself (every rank holds the same input); backward: the sum of the ranks'
// gradients (each rank's part of the layer saw x). The entry of a tensor-parallel region.
Variable copy_to_tensor_parallel(const Variable& x, const CommunicatorPtr& group, const std::string& module);
// Forward: the sum of the ranks' partial results; backward: the gradient itself. The exit of
// a row-parallel layer.
Variable reduce_from_tensor_parallel(const Variable& x, const CommunicatorPtr& group, const std::string& module);
// Forward: the ranks' sequence shards (B, T/n, ...) gathered into (B, T, ...); backward: the
// gradient reduce-scattered back to this rank's shard. Sequence parallelism's entry.
Variable gather_sequence(const Variable& x, const CommunicatorPtr& group, const std::string& module);
// Forward: the ranks' partial (B, T, ...) summed and scattered, this rank keeping its shard
// (B, T/n, ...); backward: the gradient all-gathered. Sequence parallelism's exit.
Variable reduce_scatter_sequence(const Variable& x, const CommunicatorPtr& group, const std::string& module);
// Forward: this rank's shard of a replicated (B, T, ...) (no communication); backward: the
// shards' gradients all-gathered.
Variable split_sequence(const Variable& x, const CommunicatorPtr& group, const std::string& module);

// The mean cross-entropy of vocabulary-parallel logits: `logits` (B, T, V_r) are this rank's
// columns [vocab_begin, vocab_begin + V_r) of the whole (B, T, V), which are never gathered;
// targets (B, T) hold whole-vocabulary ids. The softmax comes from three all-reduces of B*T
// numbers: the rows' maxima, their target logits (from the rank holding each), and their
// sums of exponentials. The ranks' shards may differ in width (a vocabulary that does not
// divide by the group). Backward: softmax minus the one-hot target, on this rank's columns.
Variable vocab_parallel_cross_entropy(const Variable& logits, const Tensor& targets, std::int64_t vocab_begin,
                                      const CommunicatorPtr& group);

// The part of `n` that rank `rank` of `ranks` holds when n is split as evenly as whole
// `granule`s allow (the first n/granule % ranks ranks hold one granule more): {begin, size}.
struct SplitRange {
  std::int64_t begin = 0, size = 0;
};
SplitRange split_range(std::int64_t n, int ranks, int rank, std::int64_t granule = 1);

}  // namespace dtrain::dist
