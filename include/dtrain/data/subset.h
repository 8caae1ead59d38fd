// A view of a dataset restricted to some of its indices (a quick run on the first N
// examples, a train/validation split).
#pragma once

#include "dtrain/data/dataset.h"

#include <memory>
#include <vector>

namespace dtrain::data {

class Subset final : public Dataset {
 public:
  // Throws dtrain::Error naming the first index outside [0, dataset->size()).
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<std::int64_t> indices);
  // The first `count` examples (all of them when count exceeds the size).
  static std::shared_ptr<Subset> first(std::shared_ptr<const Dataset> dataset, std::int64_t count);
  // Examples rank, rank + world_size, ...: disjoint shards that together cover the dataset
  // exactly once, sizes differing by at most one. For sharded evaluation, where padding
  // (as DistributedSampler does for training) would count examples twice.
  static std::shared_ptr<Subset> shard(std::shared_ptr<const Dataset> dataset, int rank, int world_size);

  std::int64_t size() const override { return static_cast<std::int64_t>(indices_.size()); }
  Example get(std::int64_t index) const override;
  Batch get_batch(const std::vector<std::int64_t>& indices) const override;
  Batch get_epoch_batch(const std::vector<std::int64_t>& indices, std::int64_t epoch) const override;
  std::int64_t bad_samples_skipped() const override { return dataset_->bad_samples_skipped(); }

 private:
  std::int64_t map(std::int64_t index) const;
  std::vector<std::int64_t> map(const std::vector<std::int64_t>& indices) const;

  std::shared_ptr<const Dataset> dataset_;
  std::vector<std::int64_t> indices_;
};

}  // namespace dtrain::data
