// Arithmetic, activations, reductions and shape functions.
#include "dtrain/autograd/functions.h"

#include <cmath>

namespace dtrain {
namespace {
// The gradient of a broadcast input: sum the broadcast dims away.
void add_reduced(Variable& input, const Tensor& grad) {
  if (!input.requires_grad()) return;
  input.add_grad(grad.shape() == input.shape() ? grad : sum_to(grad, input.shape()));
}
}  // namespace

// ---- arithmetic ------------------------------------------------------------------

Variable add(const Variable& a, const Variable& b) {
  return Variable(add(a.data(), b.data()), {a, b}, [](std::vector<Variable>& in, const Tensor& g) {
    add_reduced(in[0], g);
    add_reduced(in[1], g);
  });
}

Variable sub(const Variable& a, const Variable& b) {
  return Variable(sub(a.data(), b.data()), {a, b}, [](std::vector<Variable>& in, const Tensor& g) {
    add_reduced(in[0], g);
    if (in[1].requires_grad()) add_reduced(in[1], neg(g));
  });
}

Variable mul(const Variable& a, const Variable& b) {
  return Variable(mul(a.data(), b.data()), {a, b}, [](std::vector<Variable>& in, const Tensor& g) {
    if (in[0].requires_grad()) add_reduced(in[0], mul(g, in[1].data()));
    if (in[1].requires_grad()) add_reduced(in[1], mul(g, in[0].data()));
  });
}

Variable div(const Variable& a, const Variable& b) {
  return Variable(div(a.data(), b.data()), {a, b}, [](std::vector<Variable>& in, const Tensor& g) {
    const Tensor& bd = in[1].data();
    if (in[0].requires_grad()) add_reduced(in[0], div(g, bd));
    if (in[1].requires_grad()) {
      // d(a/b)/db = -a / b^2
      add_reduced(in[1], neg(div(mul(g, in[0].data()), square(bd))));
    }
  });
}

Variable add(const Variable& a, double s) {
  return Variable(add(a.data(), s), {a}, [](std::vector<Variable>& in, const Tensor& g) { in[0].add_grad(g); });
}

Variable mul(const Variable& a, double s) {
  return Variable(mul(a.data(), s), {a},
                  [s](std::vector<Variable>& in, const Tensor& g) { in[0].add_grad(mul(g, s)); });
}

Variable neg(const Variable& a) {
  return Variable(neg(a.data()), {a}, [](std::vector<Variable>& in, const Tensor& g) { in[0].add_grad(neg(g)); });
}

Variable pow(const Variable& a, double exponent) {
  return Variable(pow(a.data(), exponent), {a}, [exponent](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(mul(mul(g, pow(in[0].data(), exponent - 1)), exponent));
  });
}

Variable exp(const Variable& a) {
  Tensor y = exp(a.data());
  return Variable(y, {a}, [y](std::vector<Variable>& in, const Tensor& g) { in[0].add_grad(mul(g, y)); });
}

Variable log(const Variable& a) {
  return Variable(log(a.data()), {a},
                  [](std::vector<Variable>& in, const Tensor& g) { in[0].add_grad(div(g, in[0].data())); });
}

Variable sqrt(const Variable& a) {
  Tensor y = sqrt(a.data());
  return Variable(y, {a}, [y](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(div(mul(g, 0.5), y));
  });
}

Variable abs(const Variable& a) {
  return Variable(abs(a.data()), {a}, [](std::vector<Variable>& in, const Tensor& g) {
    // sign(0) = 0: of the kink's subgradients [-1, 1], the one PyTorch picks.
    in[0].add_grad(mul(g, unary(UnaryOp::Sign, in[0].data())));
  });
}

Variable clamp(const Variable& x, std::optional<double> min, std::optional<double> max) {
  DTRAIN_CHECK(min || max, "clamp: needs a min, a max or both; got neither");
  DTRAIN_CHECK(!(min && std::isnan(*min)) && !(max && std::isnan(*max)), "clamp: a bound is NaN (min {}, max {})",
               min.value_or(-INFINITY), max.value_or(INFINITY));
  DTRAIN_CHECK(!(min && max) || *min <= *max, "clamp: min {} is greater than max {}", *min, *max);
  // The bounds as 0-d tensors of x's dtype and device, which broadcast against it.
  const Tensor low = min ? Tensor::scalar(*min, x.data().options()) : Tensor();
  const Tensor high = max ? Tensor::scalar(*max, x.data().options()) : Tensor();
  // maximum/minimum keep a NaN x, as torch.clamp does.
  Tensor y = x.data();
  if (low.defined()) y = maximum(y, low);
  if (high.defined()) y = minimum(y, high);
  return Variable(y, {x}, [low, high](std::vector<Variable>& in, const Tensor& g) {
    const Tensor& xd = in[0].data();
    // u8 masks; their product is their logical and. A NaN x compares false: no gradient.
    Tensor inside = low.defined() ? ge(xd, low) : Tensor();
    if (high.defined()) inside = inside.defined() ? mul(inside, le(xd, high)) : le(xd, high);
    in[0].add_grad(where(inside, g, Tensor::scalar(0, g.options())));
  });
}

// ---- activations -------------------------------------------------------------------

Variable relu(const Variable& x) {
  return Variable(relu(x.data()), {x}, [](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(binary(BinaryOp::ReluGrad, g, in[0].data()));
  });
}

Variable add_relu(const Variable& a, const Variable& b) {
  Tensor y = add_relu(a.data(), b.data());
  return Variable(y, {a, b}, [y](std::vector<Variable>& in, const Tensor& g) {
    const Tensor passed = binary(BinaryOp::ReluGrad, g, y);  // y > 0 exactly where a + b > 0
    add_reduced(in[0], passed);
    add_reduced(in[1], passed);
  });
}

Variable gelu(const Variable& x) {
  return Variable(gelu(x.data()), {x}, [](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(binary(BinaryOp::GeluGrad, g, in[0].data()));
  });
}

Variable gelu(const Variable& x, GeluApproximation approx) {
  if (approx == GeluApproximation::None) return gelu(x);
  DTRAIN_CHECK(approx == GeluApproximation::Tanh, "gelu: unknown approximation {}", static_cast<int>(approx));
  return Variable(gelu_tanh(x.data()), {x}, [](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(binary(BinaryOp::GeluTanhGrad, g, in[0].data()));
  });
}

Variable silu(const Variable& x) {
  return Variable(silu(x.data()), {x}, [](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(binary(BinaryOp::SiluGrad, g, in[0].data()));
  });
}

Variable sigmoid(const Variable& x) {
  Tensor y = sigmoid(x.data());
  return Variable(y, {x}, [y](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(binary(BinaryOp::SigmoidGrad, g, y));
  });
}

Variable tanh(const Variable& x) {
  Tensor y = tanh(x.data());
  return Variable(y, {x}, [y](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(binary(BinaryOp::TanhGrad, g, y));
  });
}

// ---- reductions ----------------------------------------------------------------------

namespace {
// Shape of a reduction's output with keepdim, so that its gradient broadcasts back.
Shape keepdim_shape(const Shape& shape, const std::vector<std::int64_t>& dims, const char* op) {
  Shape out = shape;
  if (dims.empty()) {
    for (auto& d : out) d = 1;
    return out;
  }
  for (auto d : dims) {
    const int i = normalize_dim(d, static_cast<std::int64_t>(shape.size()), op);
    if (!shape.empty()) out[i] = 1;  // a 0-d tensor accepts dim 0, and stays 0-d
  }
  return out;
}
}  // namespace

Variable sum(const Variable& x, std::vector<std::int64_t> dims, bool keepdim) {
  Tensor y = sum(x.data(), dims, keepdim);
  Shape kept = keepdim_shape(x.shape(), dims, "sum");
  return Variable(y, {x}, [kept](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(g.reshape(kept).expand(in[0].shape()).contiguous());
  });
}

Variable mean(const Variable& x, std::vector<std::int64_t> dims, bool keepdim) {
  Tensor y = mean(x.data(), dims, keepdim);
  Shape kept = keepdim_shape(x.shape(), dims, "mean");
  double count = static_cast<double>(x.numel()) / static_cast<double>(std::max<std::int64_t>(y.numel(), 1));
  return Variable(y, {x}, [kept, count](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(mul(g.reshape(kept), 1.0 / count).expand(in[0].shape()).contiguous());
  });
}

namespace {
// amax/amin: every element equal to the extreme gets an equal share of its gradient.
Variable extreme(ReduceOp op, const char* name, const Variable& x, const std::vector<std::int64_t>& dims,
                 bool keepdim) {
  Shape kept = keepdim_shape(x.shape(), dims, name);  // first, so that a bad dim is named as amax's/amin's
  Tensor y = reduce(op, x.data(), dims, keepdim);
  Tensor y_kept = y.reshape(kept);
  return Variable(y, {x}, [y_kept, kept, dims](std::vector<Variable>& in, const Tensor& g) {
    const Tensor& xd = in[0].data();
    Tensor hit = eq(xd, y_kept).to(xd.dtype());
    Tensor ties = sum(hit, dims, true);
    in[0].add_grad(mul(hit, div(g.reshape(kept), ties)));
  });
}
}  // namespace

Variable amax(const Variable& x, std::vector<std::int64_t> dims, bool keepdim) {
  return extreme(ReduceOp::Max, "amax", x, dims, keepdim);
}

Variable amin(const Variable& x, std::vector<std::int64_t> dims, bool keepdim) {
  return extreme(ReduceOp::Min, "amin", x, dims, keepdim);
}

// ---- shape ---------------------------------------------------------------------------------

Variable reshape(const Variable& x, Shape shape) {
  return Variable(x.data().reshape(std::move(shape)), {x}, [](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(g.reshape(in[0].shape()));
  });
}

Variable flatten(const Variable& x, std::int64_t start_dim, std::int64_t end_dim) {
  return Variable(x.data().flatten(start_dim, end_dim), {x}, [](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(g.reshape(in[0].shape()));
  });
}

Variable transpose(const Variable& x, std::int64_t d0, std::int64_t d1) {
  return Variable(x.data().transpose(d0, d1), {x}, [d0, d1](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(g.transpose(d0, d1).contiguous());
  });
}

Variable permute(const Variable& x, const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> inverse(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) inverse[normalize_dim(dims[i], x.dim(), "permute")] = i;
  return Variable(x.data().permute(dims), {x}, [inverse](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(g.permute(inverse).contiguous());
  });
}

Variable narrow(const Variable& x, std::int64_t dim, std::int64_t start, std::int64_t length) {
  return Variable(x.data().narrow(dim, start, length), {x},
                  [dim, start, length](std::vector<Variable>& in, const Tensor& g) {
                    Tensor full = Tensor::zeros(in[0].shape(), g.options());
                    Tensor window = full.narrow(dim, start, length);
                    window.copy_(g);
                    in[0].add_grad(full);
                  });
}

Variable cat(const std::vector<Variable>& xs, std::int64_t dim) {
  std::vector<Tensor> data;
  data.reserve(xs.size());
  for (const auto& x : xs) data.push_back(x.data());
  Tensor y = cat(data, dim);
  int d = normalize_dim(dim, y.dim(), "cat");
  return Variable(y, xs, [d](std::vector<Variable>& in, const Tensor& g) {
    std::int64_t start = 0;
    for (auto& x : in) {
      std::int64_t len = x.size(d);
      if (x.requires_grad()) x.add_grad(g.narrow(d, start, len).contiguous());
      start += len;
    }
  });
}

Variable index_select(const Variable& x, std::int64_t dim, const Tensor& index) {
  return Variable(index_select(x.data(), dim, index), {x}, [dim, index](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(index_add(in[0].shape(), dim, index, g));
  });
}

}  // namespace dtrain
