// Scaled dot-product attention as two fused kernels (FlashAttention's scheme): the forward
// walks blocks of keys per block of queries with an online softmax and keeps only the
// output and each row's log-sum-exp; the backward recomputes the probabilities block by
// block from them. No (T, T) matrix exists at any time: memory linear in the sequence.
// The autograd op (dtrain/autograd/attention.h) uses these where has_fused_attention().
#pragma once

#include "dtrain/tensor/tensor.h"

namespace dtrain {

struct FusedAttentionOptions {
  bool causal = true;
  double scale = 1;  // applied to q k^T
};

// Whether `device` has the fused kernels for `dtype` and heads of `head_dim` values (the CPU:
// f32 and f64; CUDA: f32 and f64 where a block's tiles fit the device's shared memory, head
// sizes up to 358 in f64 and 721 in f32 on an H100's 227 KB).
bool has_fused_attention(Device device, DType dtype, std::int64_t head_dim);

struct FusedAttentionResult {
  Tensor out;  // (B, H, T, D): a transposed view of (B, T, H, D) memory, so that the heads join
               // back into (B, T, H * D) without a copy
  Tensor lse;  // (B, H, T): log-sum-exp of each row's scaled scores
};
// q (B, H, T, D); k and v (B, Hkv, T, D), H a multiple of Hkv (grouped-query heads); any
// strides (a last dim that is not contiguous is copied).
FusedAttentionResult attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const FusedAttentionOptions& options);

struct FusedAttentionGrads {
  Tensor q, k, v;  // shaped as q, k, v: transposed views of (B, T, heads, D) memory
};
// The gradients given the output's gradient and the forward's out and lse.
FusedAttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& out, const Tensor& lse, const FusedAttentionOptions& options);

}  // namespace dtrain
