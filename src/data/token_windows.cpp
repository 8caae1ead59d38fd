#include "dtrain/data/token_windows.h"

#include "dtrain/core/error.h"
#include "dtrain/data/distributed_sampler.h"

#include <cstring>

namespace dtrain::data {

namespace {
// splitmix64 (Steele, Lea, Flood 2014) of the seed and the index: a well-mixed 64-bit
// number from two, cheap and the same everywhere.
std::uint64_t splitmix64(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ULL + index + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
}  // namespace

std::int64_t validation_split(std::int64_t tokens) { return tokens - tokens / 10; }

TokenWindows::TokenWindows(TokenStream tokens, std::int64_t begin, std::int64_t end, std::int64_t block,
                           std::int64_t count, std::uint64_t seed, bool random)
    : tokens_(std::move(tokens)),
      begin_(begin),
      end_(end),
      block_(block),
      count_(count),
      seed_(seed),
      random_(random) {}

std::shared_ptr<TokenWindows> TokenWindows::random(TokenStream tokens, std::int64_t begin, std::int64_t end,
                                                   std::int64_t block_size, std::int64_t count, std::uint64_t seed) {
  DTRAIN_CHECK(tokens != nullptr, "TokenWindows: no token stream");
  DTRAIN_CHECK(block_size > 0 && count >= 0, "TokenWindows: block size {} and count {} must be positive", block_size,
               count);
  DTRAIN_CHECK(0 <= begin && begin <= end && end <= static_cast<std::int64_t>(tokens->size()),
               "TokenWindows: range [{}, {}) outside the stream of {} tokens", begin, end, tokens->size());
  DTRAIN_CHECK(end - begin >= block_size + 1,
               "TokenWindows: the training tokens ({}) are fewer than one window of block size {} + 1: use more text "
               "or a smaller --block-size",
               end - begin, block_size);
  return std::shared_ptr<TokenWindows>(new TokenWindows(std::move(tokens), begin, end, block_size, count, seed, true));
}

std::shared_ptr<TokenWindows> TokenWindows::sequential(TokenStream tokens, std::int64_t begin, std::int64_t end,
                                                       std::int64_t block_size, std::int64_t max_windows) {
  DTRAIN_CHECK(tokens != nullptr, "TokenWindows: no token stream");
  DTRAIN_CHECK(block_size > 0 && max_windows >= 0, "TokenWindows: block size {} must be positive, max windows {} >= 0",
               block_size, max_windows);
  DTRAIN_CHECK(0 <= begin && begin <= end && end <= static_cast<std::int64_t>(tokens->size()),
               "TokenWindows: range [{}, {}) outside the stream of {} tokens", begin, end, tokens->size());
  std::int64_t count = end - begin > 0 ? (end - begin - 1) / block_size : 0;
  DTRAIN_CHECK(count > 0,
               "TokenWindows: the validation tokens ({}) are fewer than one window of block size {} + 1: use more text "
               "or a smaller --block-size",
               end - begin, block_size);
  if (max_windows > 0 && max_windows < count) count = max_windows;
  return std::shared_ptr<TokenWindows>(new TokenWindows(std::move(tokens), begin, end, block_size, count, 0, false));
}

std::int64_t TokenWindows::position(std::int64_t index) const {
  DTRAIN_CHECK(index >= 0 && index < count_, "TokenWindows: index {} outside [0, {})", index, count_);
  if (!random_) return begin_ + index * block_;
  const auto positions = static_cast<std::uint64_t>(end_ - begin_ - block_);  // starts with a full target
  return begin_ + static_cast<std::int64_t>(splitmix64(seed_, static_cast<std::uint64_t>(index)) % positions);
}

std::shared_ptr<const Sampler> TokenWindows::rank_sampler(int rank, int world_size, std::uint64_t seed,
                                                          bool training) const {
  if (!random_ || !training) return nullptr;
  return std::make_shared<DistributedSampler>(count_, rank, world_size, seed, /*shuffle=*/false);
}

Example TokenWindows::get(std::int64_t index) const {
  Batch b = get_batch({index});
  return {b.inputs.reshape({block_}), b.targets.reshape({block_})};
}

Batch TokenWindows::get_batch(const std::vector<std::int64_t>& indices) const {
  const auto n = static_cast<std::int64_t>(indices.size());
  Tensor inputs = Tensor::empty({n, block_}, {DType::i64});
  Tensor targets = Tensor::empty({n, block_}, {DType::i64});
  auto* in = inputs.data<std::int64_t>();
  auto* out = targets.data<std::int64_t>();
  const std::int32_t* stream = tokens_->data();
  for (std::int64_t r = 0; r < n; ++r) {
    const std::int32_t* w = stream + position(indices[static_cast<std::size_t>(r)]);
    for (std::int64_t j = 0; j < block_; ++j) {
      in[r * block_ + j] = w[j];
      out[r * block_ + j] = w[j + 1];
    }
  }
  return {inputs, targets};
}

}  // namespace dtrain::data
