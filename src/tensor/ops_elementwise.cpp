// The public element-wise ops: argument checks (errors name the op and both shapes or
// dtypes), broadcasting, output allocation, and the call into the backend of the
// tensors' device.
#include "dtrain/tensor/ops.h"
#include "tensor/backend.h"
#include "tensor/functors.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dtrain {

using detail::backend;

namespace {

struct OpTraits {
  const char* name;
  bool integers;
};

OpTraits traits(UnaryOp op) {
  return detail::visit_unary(op, [](auto f) { return OpTraits{decltype(f)::kName, decltype(f)::kIntegers}; });
}
OpTraits traits(BinaryOp op) {
  return detail::visit_binary(op, [](auto f) { return OpTraits{decltype(f)::kName, decltype(f)::kIntegers}; });
}
const char* name_of(CompareOp op) {
  return detail::visit_compare(op, [](auto f) { return decltype(f)::kName; });
}

void check_dtype_allowed(const OpTraits& op, DType dtype) {
  DTRAIN_CHECK(op.integers || is_floating(dtype), "{}: expected a floating dtype (f32, f64), got {}", op.name,
               dtype_name(dtype));
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  DTRAIN_CHECK(a.device() == b.device(), "{}: tensors on different devices ({} and {})", op, a.device().str(),
               b.device().str());
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  DTRAIN_CHECK(a.dtype() == b.dtype(), "{}: dtypes differ ({} and {}); convert one with .to(dtype)", op,
               dtype_name(a.dtype()), dtype_name(b.dtype()));
}

// Checks what every two-operand op needs and returns the broadcast shape.
Shape check_pair(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op);
  check_defined(b, op);
  check_same_device(a, b, op);
  check_same_dtype(a, b, op);
  return broadcast_shapes(a.shape(), b.shape(), op);
}

// The bytes [first, last] a view can touch (strides are never negative).
std::pair<std::int64_t, std::int64_t> byte_span(const Tensor& t) {
  std::int64_t last = t.offset();
  for (std::size_t d = 0; d < t.shape().size(); ++d) last += (t.shape()[d] - 1) * t.strides()[d];
  const auto elem = static_cast<std::int64_t>(dtype_size(t.dtype()));
  return {t.offset() * elem, (last + 1) * elem - 1};
}

// Whether the two views can touch a common byte (disjoint views of one storage cannot).
bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.same_storage(b) || a.numel() == 0 || b.numel() == 0) return false;
  auto [a_first, a_last] = byte_span(a);
  auto [b_first, b_last] = byte_span(b);
  return a_first <= b_last && b_first <= a_last;
}

// An input that overlaps `out` without being the very same view would be read after the
// kernel has written part of it: hand the kernel a private copy instead. (The very same
// view is safe for an element-wise kernel, which reads each element before writing it.)
Tensor unaliased(const Tensor& in, const Tensor& out) {
  if (!overlaps(in, out)) return in;
  if (in.offset() == out.offset() && in.strides() == out.strides()) return in;
  return in.clone();
}

// Writing through a view with a stride-0 dim would write one element many times.
void check_writable(const Tensor& out, const char* op) {
  for (std::size_t d = 0; d < out.shape().size(); ++d)
    DTRAIN_CHECK(out.strides()[d] != 0 || out.shape()[d] <= 1,
                 "{}: the output (shape {}) is a broadcast view; write into a tensor with its own memory", op,
                 shape_str(out.shape()));
}

// The scalar operand of the scalar ops, in the tensor's dtype. For integer tensors the
// scalar must be an integer: silently truncating 0.5 to 0 would hide a bug.
Tensor scalar_operand(const Tensor& a, double s, const char* op) {
  check_defined(a, op);
  DTRAIN_CHECK(is_floating(a.dtype()) || s == std::trunc(s), "{}: scalar {} is not representable in {}", op, s,
               dtype_name(a.dtype()));
  return Tensor::scalar(s, a.options());
}

// self for the in-place updates: contiguous and floating.
void check_update_self(const Tensor& self, const char* op) {
  check_defined(self, op);
  DTRAIN_CHECK(self.is_contiguous(), "{}: self must be contiguous (shape {}, strides {})", op, shape_str(self.shape()),
               shape_str(self.strides()));
  DTRAIN_CHECK(is_floating(self.dtype()), "{}: expected a floating dtype (f32, f64), got {}", op,
               dtype_name(self.dtype()));
}

// An operand of an in-place update, expanded to self's shape.
Tensor update_operand(const Tensor& self, const Tensor& other, const char* op) {
  check_defined(other, op);
  check_same_device(self, other, op);
  check_same_dtype(self, other, op);
  DTRAIN_CHECK(broadcast_shapes(self.shape(), other.shape(), op) == self.shape(),
               "{}: operand of shape {} does not broadcast to self's shape {}", op, shape_str(other.shape()),
               shape_str(self.shape()));
  return unaliased(other.expand(self.shape()), self);
}

// Both tensors as host doubles, after checking they can be compared element by element.
std::pair<std::vector<double>, std::vector<double>> host_pair(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op);
  check_defined(b, op);
  DTRAIN_CHECK(a.shape() == b.shape(), "{}: shapes {} and {} differ", op, shape_str(a.shape()), shape_str(b.shape()));
  return {a.to_vector<double>(), b.to_vector<double>()};
}

}  // namespace

// ---- element-wise ----------------------------------------------------------------------

Tensor unary(UnaryOp op, const Tensor& x) {
  const OpTraits t = traits(op);
  check_defined(x, t.name);
  check_dtype_allowed(t, x.dtype());
  Tensor out = Tensor::empty(x.shape(), x.options());
  backend(x.device()).unary(op, x, out);
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const OpTraits t = traits(op);
  const Shape shape = check_pair(a, b, t.name);
  check_dtype_allowed(t, a.dtype());
  Tensor out = Tensor::empty(shape, a.options());
  backend(a.device()).binary(op, a.expand(shape), b.expand(shape), out);
  return out;
}

void binary_out(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  const OpTraits t = traits(op);
  const Shape shape = check_pair(a, b, t.name);
  check_dtype_allowed(t, a.dtype());
  check_defined(out, t.name);
  check_same_device(a, out, t.name);
  DTRAIN_CHECK(out.dtype() == a.dtype(), "{}: out has dtype {}, the inputs {}", t.name, dtype_name(out.dtype()),
               dtype_name(a.dtype()));
  DTRAIN_CHECK(out.shape() == shape, "{}: out has shape {}, but inputs {} and {} broadcast to {}", t.name,
               shape_str(out.shape()), shape_str(a.shape()), shape_str(b.shape()), shape_str(shape));
  check_writable(out, t.name);
  backend(out.device()).binary(op, unaliased(a.expand(shape), out), unaliased(b.expand(shape), out), out);
}

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) {
  const char* name = name_of(op);
  const Shape shape = check_pair(a, b, name);
  Tensor out = Tensor::empty(shape, {DType::u8, a.device()});
  backend(a.device()).compare(op, a.expand(shape), b.expand(shape), out);
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Shape ab = check_pair(a, b, "where");
  check_defined(cond, "where");
  check_same_device(cond, a, "where");
  DTRAIN_CHECK(cond.dtype() == DType::u8, "where: the condition must be u8 (e.g. from a comparison), got {}",
               dtype_name(cond.dtype()));
  const Shape shape = broadcast_shapes(cond.shape(), ab, "where");
  Tensor out = Tensor::empty(shape, a.options());
  backend(a.device()).where(cond.expand(shape), a.expand(shape), b.expand(shape), out);
  return out;
}

Tensor add(const Tensor& a, double s) { return binary(BinaryOp::Add, a, scalar_operand(a, s, "add")); }
Tensor mul(const Tensor& a, double s) { return binary(BinaryOp::Mul, a, scalar_operand(a, s, "mul")); }
Tensor pow(const Tensor& a, double s) {
  // x^2 (variances, squared errors) is common enough to skip the general pow.
  if (s == 2 && a.defined() && is_floating(a.dtype())) return square(a);
  return binary(BinaryOp::Pow, a, scalar_operand(a, s, "pow"));
}

// ---- in-place updates -----------------------------------------------------------------

Tensor& add_(Tensor& self, const Tensor& other, double alpha) {
  check_update_self(self, "add_");
  Tensor a = update_operand(self, other, "add_");
  backend(self.device()).update(detail::UpdateOp::AddScaled, self, a, Tensor(), alpha);
  return self;
}

void sgd_momentum_step_(Tensor& param, Tensor& buf, const Tensor& grad, const SgdMomentumStep& step) {
  check_update_self(param, "sgd_momentum_step_");
  check_update_self(buf, "sgd_momentum_step_");
  check_same_device(param, buf, "sgd_momentum_step_");
  check_same_dtype(param, buf, "sgd_momentum_step_");
  DTRAIN_CHECK(param.shape() == buf.shape(),
               "sgd_momentum_step_: momentum buffer of shape {} for a parameter of shape {}", shape_str(buf.shape()),
               shape_str(param.shape()));
  DTRAIN_CHECK(!param.same_storage(buf), "sgd_momentum_step_: the momentum buffer shares the parameter's storage");
  // A gradient overlapping what the step writes, even as the very same view, is read as
  // it was before the step, by every backend (the default one makes several passes): copied
  // first.
  Tensor g = update_operand(param, grad, "sgd_momentum_step_");
  if (overlaps(g, param) || overlaps(g, buf)) g = g.clone();
  backend(param.device()).sgd_momentum_step(param, buf, g, step);
}

void adam_step_(Tensor& param, Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& grad, const AdamStep& step) {
  for (Tensor* moment : {&exp_avg, &exp_avg_sq}) {
    check_update_self(*moment, "adam_step_");
    check_same_device(param, *moment, "adam_step_");
    check_same_dtype(param, *moment, "adam_step_");
    DTRAIN_CHECK(param.shape() == moment->shape(), "adam_step_: moment of shape {} for a parameter of shape {}",
                 shape_str(moment->shape()), shape_str(param.shape()));
    DTRAIN_CHECK(!param.same_storage(*moment), "adam_step_: a moment shares the parameter's storage");
  }
  check_update_self(param, "adam_step_");
  DTRAIN_CHECK(!exp_avg.same_storage(exp_avg_sq), "adam_step_: the two moments share storage");
  // As in sgd_momentum_step_: a gradient overlapping what the step writes is read as it was.
  Tensor g = update_operand(param, grad, "adam_step_");
  if (overlaps(g, param) || overlaps(g, exp_avg) || overlaps(g, exp_avg_sq)) g = g.clone();
  backend(param.device()).adam_step(param, exp_avg, exp_avg_sq, g, step);
}

Tensor& mul_(Tensor& self, double s) {
  check_update_self(self, "mul_");
  backend(self.device()).update(detail::UpdateOp::MulScalar, self, Tensor(), Tensor(), s);
  return self;
}

Tensor& mul_(Tensor& self, const Tensor& other) {
  check_update_self(self, "mul_");
  Tensor a = update_operand(self, other, "mul_");
  backend(self.device()).update(detail::UpdateOp::Mul, self, a, Tensor(), 1);
  return self;
}

Tensor& addcmul_(Tensor& self, const Tensor& a, const Tensor& b, double value) {
  check_update_self(self, "addcmul_");
  Tensor ea = update_operand(self, a, "addcmul_");
  Tensor eb = update_operand(self, b, "addcmul_");
  backend(self.device()).update(detail::UpdateOp::AddCMul, self, ea, eb, value);
  return self;
}

Tensor& addcdiv_(Tensor& self, const Tensor& a, const Tensor& b, double value) {
  check_update_self(self, "addcdiv_");
  Tensor ea = update_operand(self, a, "addcdiv_");
  Tensor eb = update_operand(self, b, "addcdiv_");
  backend(self.device()).update(detail::UpdateOp::AddCDiv, self, ea, eb, value);
  return self;
}

// ---- comparisons on the host -------------------------------------------------------------

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  auto [x, y] = host_pair(a, b, "allclose");
  for (std::size_t i = 0; i < x.size(); ++i)
    // Equal infinities are close; NaN is close to nothing.
    if (x[i] != y[i] && !(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i]))) return false;
  return true;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto [x, y] = host_pair(a, b, "max_abs_diff");
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(x[i] - y[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::quiet_NaN();
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace dtrain
