// How sharded data parallelism cuts the model among the ranks (private to dist). Each of the
// DataParallel reducer's buckets (gradient_exchange.h's BucketLayout: parameters laid end to
// end, in the order backward finishes them) is one flat vector, padded at its end to a
// multiple of the ranks; rank r owns chunk r of every bucket, `chunk` elements from r *
// chunk. A parameter may straddle two or more chunks, and a rank's chunk of a short bucket
// may hold only padding. The same layout serves the gradients (a bucket's reduce-scatter
// leaves chunk r on rank r), the optimizer's state (held for chunk r only) and the
// parameters (each rank updates chunk r; an all-gather of the chunks rebuilds the bucket).
#pragma once

#include "dtrain/comm/partition.h"
#include "dtrain/dist/data_parallel/gradient_exchange.h"

#include <cstdint>
#include <vector>

namespace dtrain::dist {

// Elements [offset, offset + length) of the bucket's member `member`, at `at` in the chunk.
struct ShardSegment {
  std::size_t member = 0;  // index in BucketLayout::members
  std::int64_t offset = 0;
  std::int64_t length = 0;
  std::int64_t at = 0;
};

struct BucketShard {
  std::int64_t numel = 0;              // the bucket's elements, without padding
  std::int64_t chunk = 0;              // elements per rank: ceil(numel / ranks)
  std::int64_t padded = 0;             // chunk * ranks
  std::vector<ShardSegment> segments;  // this rank's, in bucket order
};

// This rank's chunk of `bucket` among `ranks`. Throws on an empty bucket or a rank out of range.
BucketShard shard_bucket(const BucketLayout& bucket, int rank, int ranks);

}  // namespace dtrain::dist
