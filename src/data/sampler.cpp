#include "dtrain/data/sampler.h"

#include "dtrain/core/error.h"

#include <numeric>
#include <random>
#include <utility>

namespace dtrain::data {
namespace {

void check_epoch(std::int64_t epoch, const char* op) {
  DTRAIN_CHECK(epoch >= 0, "{}: epoch must be >= 0, got {}", op, epoch);
}

// Uniform in [0, bound) without modulo bias: reject the draws below 2^64 mod bound.
std::uint64_t draw_below(std::mt19937_64& rng, std::uint64_t bound) {
  const std::uint64_t reject_below = (0 - bound) % bound;
  for (;;) {
    std::uint64_t r = rng();
    if (r >= reject_below) return r % bound;
  }
}

}  // namespace

Sampler::~Sampler() = default;

SequentialSampler::SequentialSampler(std::int64_t n) : n_(n) {
  DTRAIN_CHECK(n >= 0, "SequentialSampler: size must be >= 0, got {}", n);
}

std::vector<std::int64_t> SequentialSampler::indices(std::int64_t epoch) const {
  check_epoch(epoch, "SequentialSampler::indices");
  std::vector<std::int64_t> out(static_cast<std::size_t>(n_));
  std::iota(out.begin(), out.end(), std::int64_t{0});
  return out;
}

RandomSampler::RandomSampler(std::int64_t n, std::uint64_t seed) : n_(n), seed_(seed) {
  DTRAIN_CHECK(n >= 0, "RandomSampler: size must be >= 0, got {}", n);
}

std::vector<std::int64_t> RandomSampler::indices(std::int64_t epoch) const {
  check_epoch(epoch, "RandomSampler::indices");
  return random_permutation(n_, seed_, epoch);
}

std::vector<std::int64_t> random_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  DTRAIN_CHECK(n >= 0, "random_permutation: n must be >= 0, got {}", n);
  check_epoch(epoch, "random_permutation");
  const auto e = static_cast<std::uint64_t>(epoch);
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(e), static_cast<std::uint32_t>(e >> 32)};
  std::mt19937_64 rng(seq);
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  std::iota(out.begin(), out.end(), std::int64_t{0});
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(draw_below(rng, static_cast<std::uint64_t>(i) + 1));
    std::swap(out[i], out[j]);
  }
  return out;
}

}  // namespace dtrain::data
