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

// ---- activations -------------------------------------------------------------------

Variable relu(const Variable& x) {
  return Variable(relu(x.data()), {x}, [](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(binary(BinaryOp::ReluGrad, g, in[0].data()));
  });
}

Variable gelu(const Variable& x) {
  return Variable(gelu(x.data()), {x}, [](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(binary(BinaryOp::GeluGrad, g, in[0].data()));
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
Shape keepdim_shape(const Shape& shape, const std::vector<std::int64_t>& dims) {
  Shape out = shape;
  if (dims.empty()) {
    for (auto& d : out) d = 1;
    return out;
  }
  for (auto d : dims) out[normalize_dim(d, static_cast<std::int64_t>(shape.size()), "reduce")] = 1;
  return out;
}
}  // namespace

Variable sum(const Variable& x, std::vector<std::int64_t> dims, bool keepdim) {
  Tensor y = sum(x.data(), dims, keepdim);
  Shape kept = keepdim_shape(x.shape(), dims);
  return Variable(y, {x}, [kept](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(g.reshape(kept).expand(in[0].shape()).contiguous());
  });
}

Variable mean(const Variable& x, std::vector<std::int64_t> dims, bool keepdim) {
  Tensor y = mean(x.data(), dims, keepdim);
  Shape kept = keepdim_shape(x.shape(), dims);
  double count = static_cast<double>(x.numel()) / static_cast<double>(std::max<std::int64_t>(y.numel(), 1));
  return Variable(y, {x}, [kept, count](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(mul(g.reshape(kept), 1.0 / count).expand(in[0].shape()).contiguous());
  });
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
