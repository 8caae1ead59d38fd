// Serves the samples of a list of tar shards by global index, reading each shard front to
// back: a shard's reader moves forward to the sample asked for, keeping the samples it
// passes until they are asked for too (a shuffle buffer's order asks for them soon). A few
// shards stay open at once, since a shuffle buffer still emits the tail of one shard while
// the next is being read. A sample behind its reader (or one evicted from the kept set)
// costs reopening its shard.
#pragma once

#include "dtrain/data/tar_shards.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace dtrain::data {

class ShardStream {
 public:
  // Shard s holds samples [first[s], first[s + 1]). `keep_limit`: samples kept read ahead
  // at most (beyond it the lowest indices are dropped and re-read if asked for).
  ShardStream(std::vector<std::filesystem::path> shards, std::vector<std::int64_t> first, std::int64_t keep_limit);
  ~ShardStream();

  // The sample with global index `index`; thread-safe (reads are serialized, which keeps
  // them sequential). Throws dtrain::Error naming the shard when it is unreadable,
  // truncated or holds fewer samples than listed.
  ShardSample take(std::int64_t index);
  const std::filesystem::path& shard_of(std::int64_t index) const;

 private:
  struct Cursor {
    std::unique_ptr<TarShardReader> reader;
    std::int64_t next = 0;  // the reader's next position in its shard
    std::uint64_t last_use = 0;
  };
  static constexpr std::size_t kOpenShards = 4;

  std::size_t shard_index(std::int64_t index) const;
  // Shard s's cursor positioned at or before `position`, opened (and moved there reading
  // headers only) when there is none.
  Cursor& cursor(std::size_t s, std::int64_t position);
  ShardSample read_next(std::size_t s, Cursor& c);

  const std::vector<std::filesystem::path> shards_;
  const std::vector<std::int64_t> first_;
  const std::int64_t keep_limit_;

  std::mutex mu_;  // guards everything below
  std::map<std::size_t, Cursor> cursors_;  // by shard
  std::uint64_t uses_ = 0;
  std::map<std::int64_t, ShardSample> kept_;
};

}  // namespace dtrain::data
