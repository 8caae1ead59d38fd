// Small f64 parameters with hand-set gradients, for checking update rules against
// reference loops written in plain doubles.
#pragma once

#include "dtrain/autograd/variable.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

namespace dtrain::optim::test {

inline Variable f64_param(const std::vector<double>& values, const Shape& shape) {
  return Variable(Tensor::from_vector(values, shape), true);
}

inline std::vector<double> values_of(const Variable& p) { return p.data().to_vector<double>(); }

// A gradient that changes sign and size with the step and the element, so that
// momentum and moment estimates see a non-trivial history.
inline std::vector<double> grad_at(int step, std::size_t n, double salt = 0) {
  std::vector<double> g(n);
  for (std::size_t j = 0; j < n; ++j) {
    g[j] = std::sin(1.3 * step + 0.7 * static_cast<double>(j) + salt) * (1 + 0.25 * static_cast<double>(j));
  }
  return g;
}

inline void set_grad(Variable& p, const std::vector<double>& g) {
  p.set_grad(Tensor::from_vector(g, p.shape()));
}

inline void require_values(const Variable& p, const std::vector<double>& expected, double tol = 1e-12) {
  const std::vector<double> actual = values_of(p);
  REQUIRE(actual.size() == expected.size());
  for (std::size_t j = 0; j < actual.size(); ++j) {
    INFO("element " << j << ": " << actual[j] << " vs " << expected[j]);
    REQUIRE(std::abs(actual[j] - expected[j]) <= tol * (1 + std::abs(expected[j])));
  }
}

}  // namespace dtrain::optim::test
