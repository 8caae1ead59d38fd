#include "dtrain/data/distributed_sampler.h"

#include "dtrain/core/error.h"

#include <numeric>

namespace dtrain::data {

DistributedSampler::DistributedSampler(std::int64_t dataset_size, int rank, int world_size, std::uint64_t seed,
                                       bool shuffle, bool drop_last)
    : n_(dataset_size), rank_(rank), world_size_(world_size), seed_(seed), shuffle_(shuffle) {
  DTRAIN_CHECK(dataset_size >= 0, "DistributedSampler: dataset size must be >= 0, got {}", dataset_size);
  DTRAIN_CHECK(world_size >= 1, "DistributedSampler: world size must be >= 1, got {}", world_size);
  DTRAIN_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: rank {} is outside [0, {})", rank, world_size);
  per_rank_ = drop_last ? n_ / world_size : (n_ + world_size - 1) / world_size;
}

std::vector<std::int64_t> DistributedSampler::indices(std::int64_t epoch) const {
  DTRAIN_CHECK(epoch >= 0, "DistributedSampler::indices: epoch must be >= 0, got {}", epoch);
  std::vector<std::int64_t> order;
  if (shuffle_) {
    order = random_permutation(n_, seed_, epoch);
  } else {
    order.resize(static_cast<std::size_t>(n_));
    std::iota(order.begin(), order.end(), std::int64_t{0});
  }
  // Position p of the padded order is order[p mod n]; with drop_last every position this
  // rank takes is below n anyway.
  std::vector<std::int64_t> out(static_cast<std::size_t>(per_rank_));
  for (std::int64_t j = 0; j < per_rank_; ++j) {
    const std::int64_t position = rank_ + j * world_size_;
    out[static_cast<std::size_t>(j)] = order[static_cast<std::size_t>(position % n_)];
  }
  return out;
}

}  // namespace dtrain::data
