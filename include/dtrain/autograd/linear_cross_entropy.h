// A language model's output projection and its cross-entropy as one differentiable op, Liger
// Kernel's FusedLinearCrossEntropy scheme: the forward runs over chunks of tokens, and for each
// computes that chunk's logits, its loss and at once its share of both gradients, then drops
// the logits. The N x V logits (823 MB in f32 for 4 x 1024 tokens of GPT-2's 50257) never
// exist at once; what the backward keeps is the two gradients, N x d and V x d.
#pragma once

#include "dtrain/autograd/variable.h"

#include <cstdint>

namespace dtrain {

struct LinearCrossEntropyOptions {
  // Tokens (rows of logits) per chunk; 0 picks the most whose logits take at most 64 MiB in
  // the operands' dtype, at least 1 (333 rows of GPT-2's vocabulary in f32). At most two
  // chunk-sized buffers live at once. Smaller chunks hold less but run smaller GEMMs, and
  // each chunk re-reads and re-writes the whole V x d weight gradient (on one CPU core, 166
  // rows of GPT-2's head ran the GEMMs measurably slower than 333).
  std::int64_t chunk_tokens = 0;
};

// The chunk size linear_cross_entropy uses for a vocabulary of `vocab` in `dtype`.
std::int64_t linear_cross_entropy_chunk(std::int64_t vocab, DType dtype, const LinearCrossEntropyOptions& options = {});

// The mean over every token of -log softmax(hidden @ weight^T)[target]: the value and gradients
// of nn::lm_loss(linear(hidden, weight, {}), targets) (cross_entropy of the flattened logits).
// hidden (N, d) or (B, T, d); weight (V, d); targets (N) or (B, T) of i64 or i32, in [0, V)
// (checked here on the CPU; on a GPU not read back, and a target out of range is reported at
// the next wait for the device, as the indexing ops report one). hidden and weight share one
// dtype, f32 or f64, and one device with the targets. Returns a scalar of that dtype.
//
// With grad mode on and hidden or weight requiring grad, the forward also computes
// d loss / d hidden (N x d) and d loss / d weight (V x d), summed over the chunks in place,
// and keeps them; the backward scales them by the incoming gradient in place and hands them
// over (once: a second backward through the op, retain_graph, is refused). Otherwise only
// the loss is computed. Autocast does not apply: the products run in the operands' dtype.
Variable linear_cross_entropy(const Variable& hidden, const Variable& weight, const Tensor& targets,
                              const LinearCrossEntropyOptions& options = {});

}  // namespace dtrain
