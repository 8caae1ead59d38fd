// The name of the op that made a graph node, for the per-op trace (trace::since_mark in the
// forward, a span per node in the backward): the function in which the node's gradient
// lambda was written, from its demangled type, without namespaces and parameters
// ("matmul", "fused_layer_norm", "scaled_dot_product_attention"); a named functor's own name.
// Cached per type: demangling runs once per op kind, and only while recording.
#pragma once

#include "dtrain/autograd/variable.h"

#include <string>

namespace dtrain::detail {

const std::string& op_name(const GradFn& grad_fn);

}  // namespace dtrain::detail
