// A dataset held in two tensors: example i is (inputs[i], targets[i]). For synthetic
// data in tests and benchmarks, and for data already in memory.
#pragma once

#include "dtrain/data/dataset.h"

namespace dtrain::data {

class TensorDataset final : public Dataset {
 public:
  // inputs (N, ...) and targets (N, ...) on the CPU; throws when the leading sizes differ.
  TensorDataset(Tensor inputs, Tensor targets);

  std::int64_t size() const override { return inputs_.size(0); }
  Example get(std::int64_t index) const override;
  Batch get_batch(const std::vector<std::int64_t>& indices) const override;

 private:
  Tensor inputs_, targets_;
};

}  // namespace dtrain::data
