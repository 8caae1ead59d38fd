#include "dtrain/data/tensor_dataset.h"

#include "dtrain/tensor/ops.h"

namespace dtrain::data {

TensorDataset::TensorDataset(Tensor inputs, Tensor targets)
    : inputs_(inputs.contiguous()), targets_(targets.contiguous()) {
  DTRAIN_CHECK(inputs_.dim() >= 1 && targets_.dim() >= 1 && inputs_.size(0) == targets_.size(0),
               "TensorDataset: inputs {} and targets {} must share their first dimension", shape_str(inputs_.shape()),
               shape_str(targets_.shape()));
  DTRAIN_CHECK(inputs_.device().is_cpu() && targets_.device().is_cpu(), "TensorDataset: tensors must be on the CPU");
}

Example TensorDataset::get(std::int64_t index) const {
  DTRAIN_CHECK(index >= 0 && index < size(), "TensorDataset: index {} outside [0, {})", index, size());
  return {inputs_.select(0, index).clone(), targets_.select(0, index).clone()};
}

Batch TensorDataset::get_batch(const std::vector<std::int64_t>& indices) const {
  Tensor index = Tensor::from_vector(indices, {static_cast<std::int64_t>(indices.size())});
  return {index_select(inputs_, 0, index), index_select(targets_, 0, index)};
}

}  // namespace dtrain::data
