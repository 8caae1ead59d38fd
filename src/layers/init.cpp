#include "dtrain/layers/init.h"

#include <cmath>

namespace dtrain::nn::init {
namespace {
std::int64_t receptive_field(const Tensor& w) {
  std::int64_t r = 1;
  for (std::int64_t d = 2; d < w.dim(); ++d) r *= w.size(d);
  return r;
}

void check_weight(const Tensor& w, const char* op) {
  DTRAIN_CHECK(w.dim() >= 2, "{}: expected a weight with at least 2 dims, got {}", op, shape_str(w.shape()));
}

double fan(const Tensor& w, FanMode mode) {
  return static_cast<double>(mode == FanMode::In ? fan_in(w) : fan_out(w));
}
}  // namespace

std::int64_t fan_in(const Tensor& w) {
  check_weight(w, "fan_in");
  return w.size(1) * receptive_field(w);
}

std::int64_t fan_out(const Tensor& w) {
  check_weight(w, "fan_out");
  return w.size(0) * receptive_field(w);
}

void kaiming_normal_(Tensor& w, FanMode mode, Generator* gen) {
  normal_(w, 0, std::sqrt(2.0 / fan(w, mode)), gen);
}

void kaiming_uniform_(Tensor& w, double a, FanMode mode, Generator* gen) {
  double gain = std::sqrt(2.0 / (1 + a * a));
  double bound = gain * std::sqrt(3.0 / fan(w, mode));
  uniform_(w, -bound, bound, gen);
}

void xavier_uniform_(Tensor& w, Generator* gen) {
  double bound = std::sqrt(6.0 / static_cast<double>(fan_in(w) + fan_out(w)));
  uniform_(w, -bound, bound, gen);
}

void xavier_normal_(Tensor& w, Generator* gen) {
  normal_(w, 0, std::sqrt(2.0 / static_cast<double>(fan_in(w) + fan_out(w))), gen);
}

}  // namespace dtrain::nn::init
