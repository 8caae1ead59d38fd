// The public reductions and the softmax family: dim normalisation, dtype and shape
// checks, output allocation (keepdim-shaped for the backend, reshaped afterwards), and
// the call into the backend of the tensor's device.
#include "dtrain/tensor/ops.h"
#include "tensor/backend.h"

#include <algorithm>

namespace dtrain {

using detail::backend;

namespace {

const char* name_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::kCount: break;
  }
  return "reduce";
}

// Non-negative, sorted, without duplicates; empty means every dim. A 0-d tensor accepts
// dim 0 or -1 and has nothing to reduce.
std::vector<std::int64_t> normalize_dims(std::vector<std::int64_t> dims, std::int64_t ndim, const char* op) {
  for (auto& d : dims) d = normalize_dim(d, ndim, op);
  if (ndim == 0) return {};
  if (dims.empty()) {
    dims.resize(ndim);
    for (std::int64_t d = 0; d < ndim; ++d) dims[d] = d;
  }
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

// x's shape with the reduced dims set to 1 (keepdim) or removed.
Shape reduced_shape(const Shape& shape, const std::vector<std::int64_t>& dims, bool keepdim) {
  Shape out;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const bool reduced = std::binary_search(dims.begin(), dims.end(), static_cast<std::int64_t>(d));
    if (!reduced) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

void check_floating(const Tensor& x, const char* op) {
  DTRAIN_CHECK(is_floating(x.dtype()), "{}: expected a floating dtype (f32, f64), got {}", op, dtype_name(x.dtype()));
}

// The softmax family works on a tensor of at least one dim; a 0-d tensor is viewed as [1].
Tensor at_least_1d(const Tensor& x) { return x.dim() == 0 ? x.reshape({1}) : x; }

Tensor softmax_forward(const Tensor& x, std::int64_t dim, bool log, const char* op) {
  check_defined(x, op);
  check_floating(x, op);
  const int d = normalize_dim(dim, x.dim(), op);
  Tensor x1 = at_least_1d(x);
  Tensor out = Tensor::empty(x1.shape(), x.options());
  backend(x.device()).softmax(x1, d, log, out);
  return out.reshape(x.shape());
}

Tensor softmax_grad(const Tensor& grad_out, const Tensor& y, std::int64_t dim, bool log, const char* op) {
  check_defined(grad_out, op);
  check_defined(y, op);
  check_floating(y, op);
  DTRAIN_CHECK(grad_out.device() == y.device(), "{}: tensors on different devices ({} and {})", op,
               grad_out.device().str(), y.device().str());
  DTRAIN_CHECK(grad_out.dtype() == y.dtype(), "{}: dtypes differ ({} and {})", op, dtype_name(grad_out.dtype()),
               dtype_name(y.dtype()));
  DTRAIN_CHECK(grad_out.shape() == y.shape(), "{}: grad_out has shape {} but the output has shape {}", op,
               shape_str(grad_out.shape()), shape_str(y.shape()));
  const int d = normalize_dim(dim, y.dim(), op);
  Tensor y1 = at_least_1d(y);
  Tensor grad_x = Tensor::empty(y1.shape(), y.options());
  backend(y.device()).softmax_backward(at_least_1d(grad_out), y1, d, log, grad_x);
  return grad_x.reshape(y.shape());
}

}  // namespace

// ---- reductions -------------------------------------------------------------------------

// Sums of integer tensors are i64 (a count of matches must not wrap at 255), mean needs a
// floating dtype, max and min keep the dtype.
Tensor reduce(ReduceOp op, const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  const char* name = name_of(op);
  check_defined(x, name);
  dims = normalize_dims(std::move(dims), x.dim(), name);
  if (op == ReduceOp::Mean) check_floating(x, name);
  if (op == ReduceOp::Max || op == ReduceOp::Min) {
    for (auto d : dims)
      DTRAIN_CHECK(x.shape()[d] > 0, "{}: cannot reduce over dim {} of size 0 (shape {}): it has no identity", name, d,
                   shape_str(x.shape()));
  }
  const DType out_dtype = op == ReduceOp::Sum && !is_floating(x.dtype()) ? DType::i64 : x.dtype();
  Tensor out = Tensor::empty(reduced_shape(x.shape(), dims, true), {out_dtype, x.device()});
  backend(x.device()).reduce(op, x, dims, out);
  return keepdim ? out : out.view(reduced_shape(x.shape(), dims, false));
}

Tensor squared_norm(const Tensor& x) {
  DTRAIN_CHECK(is_floating(x.dtype()), "squared_norm: expected a floating tensor, got {}", dtype_name(x.dtype()));
  return detail::backend(x.device()).squared_norm(x);
}

Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim) {
  check_defined(x, "argmax");
  const int d = normalize_dim(dim, x.dim(), "argmax");
  if (x.dim() == 0) return Tensor::zeros({}, {DType::i64, x.device()});
  DTRAIN_CHECK(x.shape()[d] > 0, "argmax: dim {} of shape {} is empty", d, shape_str(x.shape()));
  const std::vector<std::int64_t> dims{d};
  Tensor out = Tensor::empty(reduced_shape(x.shape(), dims, true), {DType::i64, x.device()});
  backend(x.device()).argmax(x, d, out);
  return keepdim ? out : out.view(reduced_shape(x.shape(), dims, false));
}

// Reduces the leading dims x has beyond `shape` and the dims where `shape` has 1 but x
// does not. Returns x itself when the shapes already match.
Tensor sum_to(const Tensor& x, const Shape& shape) {
  check_defined(x, "sum_to");
  const std::size_t lead = x.shape().size() - std::min(x.shape().size(), shape.size());
  DTRAIN_CHECK(shape.size() <= x.shape().size() && broadcast_shapes(shape, x.shape(), "sum_to") == x.shape(),
               "sum_to: shape {} does not broadcast to the tensor's shape {}", shape_str(shape), shape_str(x.shape()));
  if (x.shape() == shape) return x;
  std::vector<std::int64_t> dims;
  for (std::size_t d = 0; d < x.shape().size(); ++d)
    if (d < lead || (shape[d - lead] == 1 && x.shape()[d] != 1)) dims.push_back(static_cast<std::int64_t>(d));
  return sum(x, dims, true).view(shape);
}

// ---- softmax family -------------------------------------------------------------------------

Tensor softmax(const Tensor& x, std::int64_t dim) { return softmax_forward(x, dim, false, "softmax"); }
Tensor log_softmax(const Tensor& x, std::int64_t dim) { return softmax_forward(x, dim, true, "log_softmax"); }

Tensor softmax_backward(const Tensor& grad_out, const Tensor& y, std::int64_t dim) {
  return softmax_grad(grad_out, y, dim, false, "softmax_backward");
}
Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& y, std::int64_t dim) {
  return softmax_grad(grad_out, y, dim, true, "log_softmax_backward");
}

SoftmaxCrossEntropyRows softmax_cross_entropy_rows_(Tensor& logits, const Tensor& targets) {
  const char* op = "softmax_cross_entropy_rows_";
  check_defined(logits, op);
  DTRAIN_CHECK(logits.dim() == 2 && logits.size(1) > 0 && logits.is_contiguous() &&
                   (logits.dtype() == DType::f32 || logits.dtype() == DType::f64),
               "{}: logits must be (N, V) contiguous f32 or f64 with V > 0, got {} {}{}", op,
               shape_str(logits.shape()), dtype_name(logits.dtype()), logits.is_contiguous() ? "" : " (strided)");
  DTRAIN_CHECK(targets.defined() && targets.numel() == logits.size(0) && targets.dim() <= 2 &&
                   (targets.dtype() == DType::i64 || targets.dtype() == DType::i32) &&
                   targets.device() == logits.device(),
               "{}: targets must be ({}) i64 or i32 on {}, got {} {}", op, logits.size(0), logits.device().str(),
               targets.defined() ? shape_str(targets.shape()) : "undefined",
               targets.defined() ? dtype_name(targets.dtype()) : "");
  // As cross_entropy: checked where the targets can be read without waiting for a device.
  if (targets.numel() > 0 && targets.device().is_cpu()) {
    const double low = min(targets).item(), high = max(targets).item();
    DTRAIN_CHECK(low >= 0 && high < static_cast<double>(logits.size(1)),
                 "{}: targets must lie in [0, {}) (the columns of logits), found {}", op, logits.size(1),
                 low < 0 ? low : high);
  }
  SoftmaxCrossEntropyRows r{Tensor::empty({logits.size(0), 1}, logits.options()),
                            Tensor::empty({logits.size(0), 1}, logits.options())};
  if (logits.numel() == 0) return r;
  backend(logits.device()).softmax_cross_entropy_rows(logits, targets.contiguous(), r.sums, r.log_prob);
  return r;
}

}  // namespace dtrain
