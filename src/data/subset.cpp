#include "dtrain/data/subset.h"

#include "dtrain/core/error.h"

#include <algorithm>
#include <numeric>

namespace dtrain::data {

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<std::int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  DTRAIN_CHECK(dataset_ != nullptr, "Subset: the dataset is null");
  for (auto i : indices_) {
    DTRAIN_CHECK(i >= 0 && i < dataset_->size(), "Subset: index {} outside the dataset's [0, {})", i,
                 dataset_->size());
  }
}

std::shared_ptr<Subset> Subset::first(std::shared_ptr<const Dataset> dataset, std::int64_t count) {
  DTRAIN_CHECK(dataset != nullptr, "Subset: the dataset is null");
  std::vector<std::int64_t> indices(static_cast<std::size_t>(std::clamp<std::int64_t>(count, 0, dataset->size())));
  std::iota(indices.begin(), indices.end(), 0);
  return std::make_shared<Subset>(std::move(dataset), std::move(indices));
}

std::shared_ptr<Subset> Subset::shard(std::shared_ptr<const Dataset> dataset, int rank, int world_size) {
  DTRAIN_CHECK(dataset != nullptr, "Subset: the dataset is null");
  DTRAIN_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "Subset::shard: rank {} outside [0, {})", rank,
               world_size);
  std::vector<std::int64_t> indices;
  for (std::int64_t i = rank; i < dataset->size(); i += world_size) indices.push_back(i);
  return std::make_shared<Subset>(std::move(dataset), std::move(indices));
}

std::int64_t Subset::map(std::int64_t index) const {
  DTRAIN_CHECK(index >= 0 && index < size(), "Subset: index {} outside [0, {})", index, size());
  return indices_[static_cast<std::size_t>(index)];
}

Example Subset::get(std::int64_t index) const { return dataset_->get(map(index)); }

std::vector<std::int64_t> Subset::map(const std::vector<std::int64_t>& indices) const {
  std::vector<std::int64_t> mapped;
  mapped.reserve(indices.size());
  for (auto i : indices) mapped.push_back(map(i));
  return mapped;
}

Batch Subset::get_batch(const std::vector<std::int64_t>& indices) const { return dataset_->get_batch(map(indices)); }

Batch Subset::get_epoch_batch(const std::vector<std::int64_t>& indices, std::int64_t epoch) const {
  return dataset_->get_epoch_batch(map(indices), epoch);
}

}  // namespace dtrain::data
