// The gradient exchange of sharded data parallelism (private to dist): each full bucket is
// reduce-scattered (the mean over the replicas) as backward produces it, so that rank r
// receives chunk r of the averaged bucket (shard_layout.h) while backward goes on, as plain
// data parallelism's all-reduce does. The chunks live here, one per bucket, for the
// optimizer's slices to read as their gradients; a bucket whose length is not a multiple of
// the ranks goes through a padded copy, which lives until the exchange's work is waited on.
#pragma once

#include "dist/sharded/shard_layout.h"
#include "dtrain/dist/data_parallel/gradient_exchange.h"

#include <vector>

namespace dtrain::dist {

class ReduceScatterExchange final : public GradientExchange {
 public:
  // `device`: the model's, where the chunks live. `across` (hybrid sharding): the ranks
  // holding the same chunks in the other shard groups, over which each chunk is averaged
  // after its reduce-scatter (when the work is waited on); null for none. `wire` f16 or
  // bf16: an f32 bucket is divided by the ranks, cast, reduce-scattered as a sum in 16 bits
  // and its chunk cast back when the work is waited on (half the bytes); f32: as it is.
  ReduceScatterExchange(CommunicatorPtr replicas, Device device, CommunicatorPtr across = nullptr,
                        DType wire = DType::f32);
  std::string name() const override { return "reduce_scatter"; }
  void plan(const std::vector<BucketLayout>& buckets) override;
  WorkPtr start(std::size_t index, Tensor& buffer) override;

  const std::vector<BucketLayout>& buckets() const { return layouts_; }
  const BucketShard& shard(std::size_t bucket) const { return shards_.at(bucket); }
  // This rank's chunk of bucket `bucket`'s averaged gradients, after the exchange's work.
  const Tensor& gradient_chunk(std::size_t bucket) const { return chunks_.at(bucket); }

 private:
  CommunicatorPtr replicas_;
  Device device_;
  CommunicatorPtr across_;
  DType wire_;
  std::vector<BucketLayout> layouts_;
  std::vector<BucketShard> shards_;
  std::vector<Tensor> chunks_;
  // With a 16-bit wire, per f32 bucket: its padded 16-bit input and chunk, kept across
  // steps (undefined for other buckets).
  std::vector<Tensor> wire_inputs_, wire_chunks_;
};

}  // namespace dtrain::dist
