#include "dtrain/layers/activation.h"

namespace dtrain::nn {

Dropout::Dropout(double p) : p_(p) {
  DTRAIN_CHECK(p >= 0 && p < 1, "Dropout({}): probability must be in [0, 1)", p);
}

std::string Dropout::describe() const { return fmt::format("Dropout(p={})", p_); }

}  // namespace dtrain::nn
