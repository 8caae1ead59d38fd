// The gradient exchange of sharded data parallelism (private to dist): each full bucket is
// reduce-scattered (the mean over the replicas) as backward produces it, so that rank r
// receives chunk r of the averaged bucket (shard_layout.h) while backward goes on, as plain
// data parallelism's all-reduce does. The chunks live here, one per bucket, for the
// optimizer's slices to read as their gradients; a bucket whose length is not a multiple of
// the ranks goes through a padded copy, which lives until the exchange's work is waited on.
//
// Gradient exchange is a codec times a collective: the 16-bit codecs (`wire`) ride on the
// reduce-scatter itself; a codec that must see whole gradients (PowerSGD: its low-rank
// factors and its error feedback are per matrix) runs as the registry's all-reduce exchange
// of the bucket, after which each rank keeps its chunk of the averaged bucket. That needs
// every rank to hold its whole gradient buckets until their exchange, as ZeRO 1 and 2 do.
#pragma once

#include "dist/zero/shard_layout.h"
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
  // `codec`: an all-reduce exchange (make_gradient_exchange) run instead of the
  // reduce-scatter, or null; not with a 16-bit `wire`.
  ReduceScatterExchange(CommunicatorPtr replicas, Device device, CommunicatorPtr across = nullptr,
                        DType wire = DType::f32, GradientExchangePtr codec = nullptr);
  std::string name() const override { return codec_ ? codec_->name() + "+reduce_scatter" : "reduce_scatter"; }
  void plan(const std::vector<BucketLayout>& buckets) override;
  WorkPtr start(std::size_t index, Tensor& buffer) override;
  // The codec's own state (PowerSGD's error feedback and warm start), per rank.
  std::vector<std::pair<std::string, Tensor>> state() const override;
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state) override;

  const std::vector<BucketLayout>& buckets() const { return layouts_; }
  const BucketShard& shard(std::size_t bucket) const { return shards_.at(bucket); }
  // This rank's chunk of bucket `bucket`'s averaged gradients, after the exchange's work.
  const Tensor& gradient_chunk(std::size_t bucket) const { return chunks_.at(bucket); }

 private:
  CommunicatorPtr replicas_;
  Device device_;
  CommunicatorPtr across_;
  DType wire_;
  GradientExchangePtr codec_;
  std::vector<BucketLayout> layouts_;
  std::vector<BucketShard> shards_;
  std::vector<Tensor> chunks_;
  // With a 16-bit wire, per f32 bucket: its padded 16-bit input and chunk, kept across
  // steps (undefined for other buckets).
  std::vector<Tensor> wire_inputs_, wire_chunks_;
};

}  // namespace dtrain::dist
