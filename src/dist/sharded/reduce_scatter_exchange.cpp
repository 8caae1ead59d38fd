#include "dist/sharded/reduce_scatter_exchange.h"

namespace dtrain::dist {

ReduceScatterExchange::ReduceScatterExchange(CommunicatorPtr replicas, Device device)
    : replicas_(std::move(replicas)), device_(device) {}

void ReduceScatterExchange::plan(const std::vector<BucketLayout>& buckets) {
  layouts_ = buckets;
  shards_.clear();
  chunks_.clear();
  padded_.clear();
  const int ranks = replicas_->size();
  for (const BucketLayout& b : buckets) {
    shards_.push_back(shard_bucket(b, replicas_->rank(), ranks));
    const BucketShard& s = shards_.back();
    const TensorOptions options{b.dtype, device_};
    chunks_.push_back(Tensor::zeros({s.chunk}, options));
    padded_.push_back(s.padded == s.numel ? Tensor() : Tensor::zeros({s.padded}, options));
  }
}

WorkPtr ReduceScatterExchange::start(std::size_t index, Tensor& buffer) {
  const BucketShard& s = shards_.at(index);
  Tensor in = buffer;
  if (padded_[index].defined()) {
    Tensor head = padded_[index].narrow(0, 0, s.numel);
    head.copy_(buffer);
    in = padded_[index];
  }
  return replicas_->reduce_scatter_async(in.view({replicas_->size(), s.chunk}), chunks_[index], ReduceOp::Mean);
}

}  // namespace dtrain::dist
