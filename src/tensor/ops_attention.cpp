// The fused attention ops' argument checks and output layouts (fused_attention.h); the
// kernels are the backends'.
#include "dtrain/core/error.h"
#include "dtrain/tensor/fused_attention.h"
#include "tensor/backend.h"

namespace dtrain {
namespace {

// The last dim contiguous, as the kernels read rows; anything else is copied.
Tensor rows_readable(const Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); }

// (B, heads, T, D) seen through contiguous (B, T, heads, D) memory.
Tensor heads_view(std::int64_t b, std::int64_t heads, std::int64_t t, std::int64_t d, const TensorOptions& options) {
  return Tensor::empty({b, t, heads, d}, options).transpose(1, 2);
}

void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  DTRAIN_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
               "{}: expected q, k, v of shape (B, H, T, D), got {}, {}, {}", op, shape_str(q.shape()),
               shape_str(k.shape()), shape_str(v.shape()));
  DTRAIN_CHECK(k.shape() == v.shape() && k.size(0) == q.size(0) && k.size(2) == q.size(2) && k.size(3) == q.size(3) &&
                   k.size(1) > 0 && q.size(1) % k.size(1) == 0,
               "{}: k {} and v {} do not fit q {} (expected (B, Hkv, T, D), Hkv dividing H)", op, shape_str(k.shape()),
               shape_str(v.shape()), shape_str(q.shape()));
  DTRAIN_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype() && q.device() == k.device() && q.device() == v.device(),
               "{}: q, k, v must share one dtype and device", op);
  DTRAIN_CHECK(has_fused_attention(q.device(), q.dtype(), q.size(3)),
               "{}: no fused attention kernel on {} for {} heads of {}", op, q.device().str(), dtype_name(q.dtype()),
               q.size(3));
}

}  // namespace

bool has_fused_attention(Device device, DType dtype, std::int64_t head_dim) {
  return detail::backend(device).has_fused_attention(dtype, head_dim);
}

FusedAttentionResult attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const FusedAttentionOptions& options) {
  check_qkv(q, k, v, "attention_forward");
  const std::int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3);
  FusedAttentionResult r{heads_view(b, h, t, d, q.options()), Tensor::empty({b, h, t}, q.options())};
  if (q.numel() == 0) return r;
  detail::backend(q.device())
      .attention_forward(rows_readable(q), rows_readable(k), rows_readable(v), options, r.out, r.lse);
  return r;
}

FusedAttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& out, const Tensor& lse, const FusedAttentionOptions& options) {
  check_qkv(q, k, v, "attention_backward");
  DTRAIN_CHECK(grad_out.shape() == q.shape() && out.shape() == q.shape() &&
                   lse.shape() == Shape({q.size(0), q.size(1), q.size(2)}),
               "attention_backward: grad_out {}, out {}, lse {} do not fit q {}", shape_str(grad_out.shape()),
               shape_str(out.shape()), shape_str(lse.shape()), shape_str(q.shape()));
  const std::int64_t b = q.size(0), h = q.size(1), hkv = k.size(1), t = q.size(2), d = q.size(3);
  FusedAttentionGrads g{heads_view(b, h, t, d, q.options()), heads_view(b, hkv, t, d, q.options()),
                        heads_view(b, hkv, t, d, q.options())};
  if (q.numel() == 0) return g;
  detail::backend(q.device())
      .attention_backward(rows_readable(grad_out), rows_readable(q), rows_readable(k), rows_readable(v),
                          rows_readable(out), lse.contiguous(), options, g.q, g.k, g.v);
  return g;
}

}  // namespace dtrain
