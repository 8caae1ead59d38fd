#include "dist/zero/shard_layout.h"

#include "dtrain/core/error.h"

#include <algorithm>

namespace dtrain::dist {

BucketShard shard_bucket(const BucketLayout& bucket, int rank, int ranks) {
  DTRAIN_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "zero: rank {} of {} is out of range", rank, ranks);
  DTRAIN_CHECK(bucket.numel > 0, "zero: a bucket holds no elements");
  BucketShard s;
  s.numel = bucket.numel;
  s.chunk = (bucket.numel + ranks - 1) / ranks;
  s.padded = s.chunk * ranks;
  const std::int64_t begin = s.chunk * rank, end = std::min(begin + s.chunk, bucket.numel);
  for (std::size_t m = 0; m < bucket.members.size(); ++m) {
    const auto& member = bucket.members[m];
    std::int64_t numel = 1;
    for (std::int64_t d : member.shape) numel *= d;
    const std::int64_t lo = std::max(begin, member.offset), hi = std::min(end, member.offset + numel);
    if (lo < hi) s.segments.push_back({.member = m, .offset = lo - member.offset, .length = hi - lo, .at = lo - begin});
  }
  return s;
}

}  // namespace dtrain::dist
