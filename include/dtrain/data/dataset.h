// Random-access datasets: the interface every data source implements and the loader reads.
#pragma once

#include "dtrain/tensor/tensor.h"

#include <cstdint>
#include <vector>

namespace dtrain::data {

// One sample: the model input and its target (for classification, an i64 scalar label).
struct Example {
  Tensor input;
  Tensor target;
};

// Samples stacked along a new leading dimension: inputs (N, ...input shape),
// targets (N, ...target shape).
struct Batch {
  Tensor inputs;
  Tensor targets;
};

class Dataset {
 public:
  virtual ~Dataset();
  virtual std::int64_t size() const = 0;
  // The example at `index` in [0, size()), as CPU tensors. Must be safe to call from several
  // threads at once: the data loader assembles batches on background threads.
  virtual Example get(std::int64_t index) const = 0;
  // The examples at `indices` stacked into one batch (same thread-safety as get()). The
  // default calls get() per index and copies the results, which must agree in shape and
  // dtype (it needs at least one index to learn them); datasets that can fill the batch
  // tensors directly override it for speed.
  virtual Batch get_batch(const std::vector<std::int64_t>& indices) const;
};

}  // namespace dtrain::data
