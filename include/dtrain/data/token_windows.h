// Language-model samples from a token stream: windows of block size + 1 tokens, the first
// block_size as the input and the same shifted by one as the target (both i64 (T)).
//
// Training draws window i (of size()) at a position keyed by (seed, i) alone, so that the
// k-th global batch (samples k*G .. k*G + G-1 of an unshuffled order) is the same whatever
// the number of replicas that split it, and a resumed run draws what the uninterrupted run
// drew. Evaluation reads the non-overlapping windows of its range in order, so that any
// other implementation can compute the same validation loss.
#pragma once

#include "dtrain/data/dataset.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace dtrain::data {

using TokenStream = std::shared_ptr<const std::vector<std::int32_t>>;

// Where a stream of n tokens splits: training [0, split), validation [split, n), with
// split = n - floor(n / 10) (the last 10%).
std::int64_t validation_split(std::int64_t tokens);

class TokenWindows : public Dataset {
 public:
  // `count` windows at positions drawn uniformly from [begin, end - block_size - 1] by
  // (seed, index): window i starts at begin + splitmix64(seed, i) mod (end - begin - block_size).
  static std::shared_ptr<TokenWindows> random(TokenStream tokens, std::int64_t begin, std::int64_t end,
                                              std::int64_t block_size, std::int64_t count, std::uint64_t seed);
  // The non-overlapping windows begin, begin + T, ... that fit in [begin, end) with their
  // shifted target, the first `max_windows` of them (0: all).
  static std::shared_ptr<TokenWindows> sequential(TokenStream tokens, std::int64_t begin, std::int64_t end,
                                                  std::int64_t block_size, std::int64_t max_windows = 0);

  std::int64_t size() const override { return count_; }
  // Training windows in index order, rank r of W taking r, r + W, ... (the positions are
  // random already): the k-th global batch of G is windows k*G .. k*G + G-1 however many
  // ranks and micro-batches share it. Validation windows: the Trainer's default split.
  std::shared_ptr<const Sampler> rank_sampler(int rank, int world_size, std::uint64_t seed,
                                              bool training) const override;
  Example get(std::int64_t index) const override;
  Batch get_batch(const std::vector<std::int64_t>& indices) const override;
  // Where window `index` starts in the stream.
  std::int64_t position(std::int64_t index) const;
  std::int64_t block_size() const { return block_; }

 private:
  TokenWindows(TokenStream tokens, std::int64_t begin, std::int64_t end, std::int64_t block, std::int64_t count,
               std::uint64_t seed, bool random);
  TokenStream tokens_;
  std::int64_t begin_, end_, block_, count_;
  std::uint64_t seed_;
  bool random_;
};

}  // namespace dtrain::data
