// Synchronized batch normalization: batch statistics (mean and variance per channel)
// are all-reduced across the ranks of a communicator, so that N ranks with batch B/N
// normalize exactly like one process with batch B.
#pragma once

#include "dtrain/comm/communicator.h"
#include "dtrain/layers/normalization.h"

namespace dtrain::dist {

class SyncBatchNorm : public nn::BatchNorm {
 public:
  // Takes over the configuration and state (weights, running statistics) of `original`.
  SyncBatchNorm(const nn::BatchNorm& original, CommunicatorPtr comm);
  std::string describe() const override;

 protected:
  Variable normalize_batch(const Variable& x, Tensor& batch_mean, Tensor& unbiased_var, bool relu) override;

 private:
  CommunicatorPtr comm_;
};

// Replaces every BatchNorm child in the module tree by a SyncBatchNorm (see
// Module::replace_child for which forward passes see the replacement). Returns the count.
int convert_sync_batch_norm(nn::Module& module, const CommunicatorPtr& comm);

}  // namespace dtrain::dist
