// detail::cpu::vector_exp, the f32 exp the CPU kernels inline (sigmoid, SiLU, GELU's tanh form, the
// fused attention and the fused head's softmax), against libm's correctly rounded double exp
// over every f32 exponent that matters: within 2 ulps for normal results, within one unit of
// the subnormal spacing (2^-149) below, exactly 0 under -103.98 and infinity over 88.73, and
// NaN through.
#include "tensor/cpu/vector_exp.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

namespace dtrain {
namespace {

// The distance in units in the last place of the correctly rounded result.
double ulps(float got, double exact) {
  const float rounded = static_cast<float>(exact);
  const float next = std::nextafter(rounded, std::numeric_limits<float>::infinity());
  return std::fabs(static_cast<double>(got) - exact) / (static_cast<double>(next) - rounded);
}

}  // namespace

TEST_CASE("vector_exp is within 2 ulps of exp, subnormals included, and saturates past the f32 range",
          "[cpu][tensor]") {
  double worst = 0, worst_x = 0;
  int checked = 0;
  for (float x = -103.9f; x < 88.72f; x += 0.0037f) {
    const double exact = std::exp(static_cast<double>(x));
    const double err = ulps(detail::cpu::vector_exp(x), exact);
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
    ++checked;
  }
  INFO("worst " << worst << " ulps at x = " << worst_x << " over " << checked << " points");
  CHECK(worst <= 2.0);
  // Subnormal: exp(-100) = 3.7e-44 is 26 units of 2^-149.
  CHECK(detail::cpu::vector_exp(-100.0f) == static_cast<float>(std::exp(-100.0)));
  CHECK(detail::cpu::vector_exp(-104.0f) == 0.0f);
  CHECK(detail::cpu::vector_exp(-1000.0f) == 0.0f);
  CHECK(detail::cpu::vector_exp(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(detail::cpu::vector_exp(88.72f) == Approx(std::exp(static_cast<double>(88.72f))).epsilon(1e-6));
  CHECK(std::isinf(detail::cpu::vector_exp(88.74f)));
  CHECK(std::isinf(detail::cpu::vector_exp(std::numeric_limits<float>::infinity())));
  CHECK(std::isnan(detail::cpu::vector_exp(std::nanf(""))));
  CHECK(detail::cpu::vector_exp(0.0f) == 1.0f);
}

}  // namespace dtrain
