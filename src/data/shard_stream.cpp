#include "data/shard_stream.h"

#include "dtrain/core/error.h"

#include <algorithm>

namespace dtrain::data {

ShardStream::ShardStream(std::vector<std::filesystem::path> shards, std::vector<std::int64_t> first,
                         std::int64_t keep_limit)
    : shards_(std::move(shards)), first_(std::move(first)), keep_limit_(std::max<std::int64_t>(keep_limit, 1)) {
  DTRAIN_CHECK(first_.size() == shards_.size() + 1, "ShardStream: {} shards need {} boundaries, got {}",
               shards_.size(), shards_.size() + 1, first_.size());
}

ShardStream::~ShardStream() = default;

std::size_t ShardStream::shard_index(std::int64_t index) const {
  DTRAIN_CHECK(index >= 0 && index < first_.back(), "sharded dataset: index {} outside [0, {})", index, first_.back());
  return static_cast<std::size_t>(std::upper_bound(first_.begin(), first_.end(), index) - first_.begin() - 1);
}

const std::filesystem::path& ShardStream::shard_of(std::int64_t index) const { return shards_[shard_index(index)]; }

ShardStream::Cursor& ShardStream::cursor(std::size_t s, std::int64_t position) {
  if (auto it = cursors_.find(s); it != cursors_.end() && it->second.next <= position) return it->second;
  cursors_.erase(s);
  if (cursors_.size() >= kOpenShards) {
    auto oldest = std::min_element(cursors_.begin(), cursors_.end(),
                                   [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
    cursors_.erase(oldest);
  }
  Cursor c;
  c.reader = std::make_unique<TarShardReader>(shards_[s]);
  const std::int64_t skipped = c.reader->skip(position);
  DTRAIN_CHECK(skipped == position, "shard '{}': holds {} samples, but its listing says {}", shards_[s].string(),
               skipped, first_[s + 1] - first_[s]);
  c.next = position;
  return cursors_[s] = std::move(c);
}

ShardSample ShardStream::read_next(std::size_t s, Cursor& c) {
  ShardSample sample;
  bool got = false;
  try {
    got = c.reader->next(sample);
  } catch (...) {
    cursors_.erase(s);  // a damaged shard: the next request reopens it rather than reading on
    throw;
  }
  if (!got) {
    const std::int64_t held = c.next;
    cursors_.erase(s);
    DTRAIN_FAIL("shard '{}': holds {} samples, but its listing says {}", shards_[s].string(), held,
                first_[s + 1] - first_[s]);
  }
  ++c.next;
  return sample;
}

ShardSample ShardStream::take(std::int64_t index) {
  const std::size_t s = shard_index(index);
  const std::int64_t position = index - first_[s];
  std::lock_guard lock(mu_);
  if (auto it = kept_.find(index); it != kept_.end()) {
    ShardSample sample = std::move(it->second);
    kept_.erase(it);
    return sample;
  }
  Cursor& c = cursor(s, position);
  c.last_use = ++uses_;
  while (c.next < position) {
    const std::int64_t passed = first_[s] + c.next;
    ShardSample sample = read_next(s, c);
    kept_.emplace(passed, std::move(sample));
    if (static_cast<std::int64_t>(kept_.size()) > keep_limit_) kept_.erase(kept_.begin());
  }
  return read_next(s, c);
}

}  // namespace dtrain::data
