// The train tests' toy data set: two Gaussian blobs in 2-D, centred at (-1.5, 0) and
// (1.5, 0), nearly separable, labelled 0 and 1.
#pragma once

#include "dtrain/data/tensor_dataset.h"
#include "dtrain/tensor/ops.h"

#include <memory>

namespace dtrain::test {

inline std::shared_ptr<data::TensorDataset> blobs(std::int64_t n, std::uint64_t seed) {
  Generator gen(seed);
  Tensor x = Tensor::empty({n, 2});
  normal_(x, 0, 0.5, &gen);
  Tensor labels = Tensor::empty({n}, {DType::i64});
  bernoulli_(labels, 0.5, &gen);
  Tensor shift = mul(sub(labels.to(DType::f32), 0.5), 3.0);  // -1.5 or +1.5
  Tensor xs = x.select(1, 0);
  xs.copy_(add(xs, shift));
  return std::make_shared<data::TensorDataset>(x, labels);
}

}  // namespace dtrain::test
