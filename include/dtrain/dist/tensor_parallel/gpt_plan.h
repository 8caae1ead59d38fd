// The tensor-parallel plan of nn::gpt's models (layers/gpt.h), Megatron-LM's layout: the
// token embedding and the output projection split by vocabulary, attention by heads (the
// fused q, k, v projection column-parallel by heads, the output projection row-parallel),
// the MLP column- then row-parallel, the norms on the residual stream (sequence shards under
// sequence parallelism). Forward per block: one all-reduce after attention and one after
// the MLP (sequence parallelism: an all-gather before and a reduce-scatter after each).
#pragma once

#include "dtrain/dist/tensor_parallel/parallelize.h"
#include "dtrain/layers/gpt.h"

namespace dtrain::dist {

TensorParallelPlan gpt_tensor_parallel_plan(const nn::GptConfig& config);

}  // namespace dtrain::dist
