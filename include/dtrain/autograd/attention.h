// Scaled dot-product attention, the core of a transformer's self-attention, as one
// differentiable op: softmax(q k^T * scale + causal mask) v, with dropout on the attention
// weights and grouped-query heads. One entry point, so that a fused, memory-efficient
// kernel (flash attention) can take its place without the model changing.
#pragma once

#include "dtrain/autograd/variable.h"
#include "dtrain/tensor/ops.h"

#include <optional>

namespace dtrain {

struct AttentionOptions {
  bool causal = true;                          // position t attends to positions <= t only
  double dropout = 0;                          // on the attention weights, in [0, 1)
  Generator* generator = nullptr;              // dropout's numbers (null: the default generator)
  std::optional<double> scale = std::nullopt;  // default 1 / sqrt(head dim)
};

// q (B, H, T, D); k and v (B, Hkv, T, D) with H a multiple of Hkv: grouped-query attention,
// where query heads h*G .. h*G + G-1 (G = H / Hkv) share key/value head h, as Llama's
// repeat_kv gives them. Returns (B, H, T, D). Without dropout, on a device with fused
// kernels (the CPU, CUDA for the head sizes it fits; fused_attention.h) and unless fused_kernels() is off (fusion.h), it runs
// them and keeps q, k, v, the output and a log-sum-exp per row: memory linear in T. Otherwise
// the products, mask and softmax as tensor ops, keeping the attention weights (B*H*T*T
// values) for the backward. Scale must be > 0.
Variable scaled_dot_product_attention(const Variable& q, const Variable& k, const Variable& v,
                                      const AttentionOptions& options = {});

}  // namespace dtrain
