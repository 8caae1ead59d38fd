// DistributedSampler: one rank's share of every epoch, for data-parallel training. Every
// rank builds the same epoch order (a permutation from (seed, epoch), or 0..n-1 when not
// shuffling) without talking to the others, and takes a strided share of it: rank r
// visits positions r, r + W, r + 2W, ... (W = world_size), as PyTorch's sampler does.
// Rank and world size are plain numbers, so the data module does not depend on dist.
//
// The shares are equal-sized (every rank runs the same number of steps), which needs the
// epoch's length to be a multiple of W:
//   drop_last = false (default): the order is padded to ceil(n / W) * W positions by
//     repeating it from its start, so every example is visited and the first
//     ceil(n / W) * W - n examples of the order twice (when n < W the order repeats
//     cyclically, as often as needed); size() = ceil(n / W).
//   drop_last = true: the last n mod W positions of the order are dropped, so the shares
//     are disjoint and nothing repeats, but those examples are skipped this epoch (a
//     different set each epoch when shuffling); size() = floor(n / W).
#pragma once

#include "dtrain/data/sampler.h"

namespace dtrain::data {

class DistributedSampler final : public Sampler {
 public:
  // Throws unless dataset_size >= 0, world_size >= 1 and 0 <= rank < world_size. A
  // dataset smaller than world_size gives empty shares with drop_last.
  DistributedSampler(std::int64_t dataset_size, int rank, int world_size, std::uint64_t seed, bool shuffle = true,
                     bool drop_last = false);

  std::vector<std::int64_t> indices(std::int64_t epoch) const override;
  std::int64_t size() const override { return per_rank_; }  // this rank's share

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

 private:
  std::int64_t n_;
  int rank_;
  int world_size_;
  std::uint64_t seed_;
  bool shuffle_;
  std::int64_t per_rank_;
};

}  // namespace dtrain::data
