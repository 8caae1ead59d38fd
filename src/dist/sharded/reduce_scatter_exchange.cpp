#include "dist/sharded/reduce_scatter_exchange.h"

namespace dtrain::dist {
namespace {

// A collective's work that keeps its padded input alive until it has been waited on (on a
// GPU the collective reads it on its own stream).
class KeepInput final : public Work {
 public:
  KeepInput(WorkPtr work, Tensor input) : work_(std::move(work)), input_(std::move(input)) {}
  void wait() override {
    work_->wait();
    input_ = Tensor();
  }

 private:
  WorkPtr work_;
  Tensor input_;
};

}  // namespace

ReduceScatterExchange::ReduceScatterExchange(CommunicatorPtr replicas, Device device)
    : replicas_(std::move(replicas)), device_(device) {}

void ReduceScatterExchange::plan(const std::vector<BucketLayout>& buckets) {
  layouts_ = buckets;
  shards_.clear();
  chunks_.clear();
  const int ranks = replicas_->size();
  for (const BucketLayout& b : buckets) {
    shards_.push_back(shard_bucket(b, replicas_->rank(), ranks));
    const BucketShard& s = shards_.back();
    const TensorOptions options{b.dtype, device_};
    chunks_.push_back(Tensor::zeros({s.chunk}, options));
  }
}

WorkPtr ReduceScatterExchange::start(std::size_t index, Tensor& buffer) {
  const BucketShard& s = shards_.at(index);
  const std::int64_t ranks = replicas_->size();
  if (s.padded == s.numel) {
    return replicas_->reduce_scatter_async(buffer.view({ranks, s.chunk}), chunks_[index], ReduceOp::Mean);
  }
  Tensor padded = Tensor::empty({s.padded}, buffer.options());
  padded.narrow(0, 0, s.numel).copy_(buffer);
  padded.narrow(0, s.numel, s.padded - s.numel).zero_();
  WorkPtr work = replicas_->reduce_scatter_async(padded.view({ranks, s.chunk}), chunks_[index], ReduceOp::Mean);
  return std::make_shared<KeepInput>(std::move(work), std::move(padded));
}

}  // namespace dtrain::dist
