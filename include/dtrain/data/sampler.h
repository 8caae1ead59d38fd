// Samplers: which dataset indices an epoch visits, and in what order. An epoch's order is
// a pure function of the sampler's construction arguments and the epoch number, so every
// rank (and a run resumed from a checkpoint) computes the same order without talking.
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::data {

class Sampler {
 public:
  virtual ~Sampler();
  // The indices visited in `epoch` (>= 0), in order; always size() of them.
  virtual std::vector<std::int64_t> indices(std::int64_t epoch) const = 0;
  // Indices per epoch (for a sharding sampler, this rank's share).
  virtual std::int64_t size() const = 0;
};

// 0, 1, ..., n-1 in every epoch.
class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(std::int64_t n);
  std::vector<std::int64_t> indices(std::int64_t epoch) const override;
  std::int64_t size() const override { return n_; }

 private:
  std::int64_t n_;
};

// A fresh permutation of 0..n-1 per epoch: random_permutation(n, seed, epoch).
class RandomSampler final : public Sampler {
 public:
  RandomSampler(std::int64_t n, std::uint64_t seed);
  std::vector<std::int64_t> indices(std::int64_t epoch) const override;
  std::int64_t size() const override { return n_; }

 private:
  std::int64_t n_;
  std::uint64_t seed_;
};

// A permutation of 0..n-1 determined by (seed, epoch) alone, identical on every platform:
// a Fisher-Yates shuffle driven by std::mt19937_64 seeded through std::seed_seq with the
// 32-bit halves of seed and epoch (both fully specified by the standard), with unbiased
// bounded draws by rejection (std::uniform_int_distribution is implementation-defined).
// Samplers that shard an epoch across ranks share it so that the shards stay disjoint.
std::vector<std::int64_t> random_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch);

}  // namespace dtrain::data
