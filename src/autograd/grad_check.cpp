#include "dtrain/autograd/grad_check.h"

#include "dtrain/autograd/functions.h"

#include <cmath>

namespace dtrain {
namespace {
// sum(f(inputs) * w) in double, without recording a graph.
double weighted_output(const std::function<Variable(const std::vector<Variable>&)>& f,
                       const std::vector<Variable>& inputs, const Tensor& w) {
  NoGradGuard no_grad;
  Tensor y = f(inputs).data();
  return sum(mul(y.to(DType::f64), w)).item();
}
}  // namespace

GradCheckResult grad_check(const std::function<Variable(const std::vector<Variable>&)>& f,
                           const std::vector<Variable>& inputs, double eps, double atol, double rtol) {
  GradCheckResult result;
  // Fresh leaves holding private copies, so the caller's variables are not touched.
  std::vector<Variable> leaves;
  for (const auto& v : inputs) leaves.emplace_back(v.data().clone(), v.requires_grad());

  Variable out = f(leaves);
  Generator gen(1234);
  Tensor w = Tensor::empty(out.shape(), {DType::f64, out.device()});
  uniform_(w, 0.5, 1.5, &gen);
  DTRAIN_CHECK(out.requires_grad(), "grad_check: the output does not depend on any input that requires grad");
  Variable loss = sum(mul(out, Variable(w.to(out.dtype()))));
  loss.backward();

  for (std::size_t i = 0; i < leaves.size(); ++i) {
    Variable& leaf = leaves[i];
    if (!leaf.requires_grad()) continue;
    std::vector<double> analytic =
        leaf.has_grad() ? leaf.grad().to_vector<double>() : std::vector<double>(static_cast<std::size_t>(leaf.numel()), 0.0);
    std::vector<double> values = leaf.data().to_vector<double>();
    for (std::size_t k = 0; k < values.size(); ++k) {
      auto evaluate = [&](double value) {
        std::vector<double> perturbed = values;
        perturbed[k] = value;
        std::vector<Variable> probe = leaves;
        probe[i] = Variable(Tensor::from_vector(perturbed, leaf.shape()).to(leaf.dtype()).to(leaf.device()), true);
        return weighted_output(f, probe, w);
      };
      double numeric = (evaluate(values[k] + eps) - evaluate(values[k] - eps)) / (2 * eps);
      double err = std::abs(numeric - analytic[k]);
      double rel = err / std::max(std::abs(numeric), 1e-12);
      result.max_abs_error = std::max(result.max_abs_error, err);
      result.max_rel_error = std::max(result.max_rel_error, rel);
      if (err > atol + rtol * std::abs(numeric) && result.ok) {
        result.ok = false;
        result.report = fmt::format("input {} element {}: analytic {:.8g}, numeric {:.8g} (|diff| {:.3g})", i, k,
                                    analytic[k], numeric, err);
      }
    }
  }
  if (result.ok) {
    result.report = fmt::format("ok: max abs error {:.3g}, max rel error {:.3g}", result.max_abs_error,
                                result.max_rel_error);
  }
  return result;
}

}  // namespace dtrain
