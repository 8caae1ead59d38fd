// Rotary position embedding: the cos/sin tables, and argument checks and output allocation
// for the rotation, which the backends run.
#include "dtrain/tensor/ops.h"

#include "tensor/backend.h"

#include <cmath>
#include <vector>

namespace dtrain {

RopeTables rope_tables(std::int64_t positions, std::int64_t head_dim, double theta, DType dtype, Device device,
                       std::int64_t first_position) {
  DTRAIN_CHECK(positions >= 0 && first_position >= 0,
               "rope_tables: positions ({}) and first_position ({}) must not be negative", positions, first_position);
  DTRAIN_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope_tables: head_dim must be even and positive, got {}", head_dim);
  DTRAIN_CHECK(theta > 0, "rope_tables: theta must be positive, got {}", theta);
  DTRAIN_CHECK(dtype == DType::f32 || dtype == DType::f64, "rope_tables: dtype must be f32 or f64, got {}",
               dtype_name(dtype));
  const std::int64_t half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<std::size_t>(i)] =
        std::pow(theta, -static_cast<double>(2 * i) / static_cast<double>(head_dim));
  }
  std::vector<double> c(static_cast<std::size_t>(positions * half)), s(c.size());
  for (std::int64_t t = 0; t < positions; ++t) {
    const double p = static_cast<double>(first_position + t);
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = p * inv_freq[static_cast<std::size_t>(i)];
      c[static_cast<std::size_t>(t * half + i)] = std::cos(angle);
      s[static_cast<std::size_t>(t * half + i)] = std::sin(angle);
    }
  }
  return {Tensor::from_vector(c, {positions, half}).to(dtype).to(device),
          Tensor::from_vector(s, {positions, half}).to(dtype).to(device)};
}

namespace {

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse, const char* op) {
  check_defined(x, op);
  check_defined(cos, op);
  check_defined(sin, op);
  DTRAIN_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f64, "{}: input must be f32 or f64, got {}{}", op,
               dtype_name(x.dtype()), is_half(x.dtype()) ? " (convert 16-bit activations with .to(DType::f32))" : "");
  DTRAIN_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, "{}: expected input (B, T, H, D) with D even, got {}", op,
               shape_str(x.shape()));
  const Shape table{x.size(1), x.size(3) / 2};
  for (const Tensor* t : {&cos, &sin}) {
    DTRAIN_CHECK(t->shape() == table && t->dtype() == x.dtype() && t->device() == x.device(),
                 "{}: cos and sin must be (T, D/2) = {} {} on {} for input {}, got {} {} on {}", op, shape_str(table),
                 dtype_name(x.dtype()), x.device().str(), shape_str(x.shape()), shape_str(t->shape()),
                 dtype_name(t->dtype()), t->device().str());
  }
  Tensor out = Tensor::empty(x.shape(), x.options());
  if (x.numel() == 0) return out;
  detail::backend(x.device()).rope(x.contiguous(), cos.contiguous(), sin.contiguous(), inverse, out);
  return out;
}

}  // namespace

Tensor rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  return rope(x, cos, sin, false, "rope_forward");
}

Tensor rope_backward(const Tensor& grad_out, const Tensor& cos, const Tensor& sin) {
  return rope(grad_out, cos, sin, true, "rope_backward");
}

}  // namespace dtrain
