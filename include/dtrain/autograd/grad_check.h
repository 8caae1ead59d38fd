// Finite-difference gradient checking: compares the gradients backward() computes with
// central differences (f(x+h) - f(x-h)) / 2h. Run it on f64 inputs for tight tolerances.
#pragma once

#include "dtrain/autograd/variable.h"

#include <functional>
#include <string>
#include <vector>

namespace dtrain {

struct GradCheckResult {
  bool ok = true;
  double max_abs_error = 0;
  double max_rel_error = 0;
  std::string report;  // the first mismatch: input index, element, analytic, numeric
};

// f maps the inputs to any output; the check differentiates sum(output * w) for a fixed
// random w, so every output element matters. Only inputs that require grad are checked.
GradCheckResult grad_check(const std::function<Variable(const std::vector<Variable>&)>& f,
                           const std::vector<Variable>& inputs, double eps = 1e-6, double atol = 1e-5,
                           double rtol = 1e-4);

}  // namespace dtrain
