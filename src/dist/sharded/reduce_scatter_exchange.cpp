#include "dist/sharded/reduce_scatter_exchange.h"

#include "dtrain/core/error.h"

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

// A 16-bit reduce-scatter: once done, its chunk cast back into the bucket's f32 chunk; the
// 16-bit input lives until then.
class CastChunkBack final : public Work {
 public:
  CastChunkBack(WorkPtr work, Tensor input, Tensor wire_chunk, Tensor chunk)
      : work_(std::move(work)),
        input_(std::move(input)),
        wire_chunk_(std::move(wire_chunk)),
        chunk_(std::move(chunk)) {}
  void wait() override {
    work_->wait();  // rethrows its failure on every call
    if (!input_.defined()) return;
    chunk_.copy_(wire_chunk_);
    input_ = Tensor();
  }

 private:
  WorkPtr work_;
  Tensor input_, wire_chunk_, chunk_;
};

// Hybrid sharding: once the reduce-scatter inside the group is done, the mean of the chunk
// across the groups (every rank waits on its buckets in the same order, so these pair up).
class ThenAcross final : public Work {
 public:
  ThenAcross(WorkPtr work, CommunicatorPtr across, Tensor chunk)
      : work_(std::move(work)), across_(std::move(across)), chunk_(std::move(chunk)) {}
  void wait() override {
    if (!work_) return;
    work_->wait();
    work_.reset();
    across_->all_reduce(chunk_, ReduceOp::Mean);
  }

 private:
  WorkPtr work_;
  CommunicatorPtr across_;
  Tensor chunk_;
};

}  // namespace

ReduceScatterExchange::ReduceScatterExchange(CommunicatorPtr replicas, Device device, CommunicatorPtr across,
                                             DType wire)
    : replicas_(std::move(replicas)), device_(device), across_(std::move(across)), wire_(wire) {
  DTRAIN_CHECK(wire_ == DType::f32 || is_half(wire_),
               "reduce-scatter exchange: the wire dtype must be f32, f16 or bf16, got {}", dtype_name(wire_));
}

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
  WorkPtr work;
  if (is_half(wire_) && buffer.dtype() == DType::f32) {
    // Divided before the cast (the 16-bit sum of the shares stays in one gradient's range).
    Tensor input = Tensor::zeros({s.padded}, {wire_, buffer.device()});
    input.narrow(0, 0, s.numel).copy_(mul(buffer.view({s.numel}), 1.0 / static_cast<double>(ranks)));
    Tensor wire_chunk = Tensor::empty({s.chunk}, {wire_, buffer.device()});
    work = replicas_->reduce_scatter_async(input.view({ranks, s.chunk}), wire_chunk, ReduceOp::Sum);
    work = std::make_shared<CastChunkBack>(std::move(work), std::move(input), std::move(wire_chunk), chunks_[index]);
  } else if (s.padded == s.numel) {
    work = replicas_->reduce_scatter_async(buffer.view({ranks, s.chunk}), chunks_[index], ReduceOp::Mean);
  } else {
    Tensor padded = Tensor::empty({s.padded}, buffer.options());
    padded.narrow(0, 0, s.numel).copy_(buffer);
    padded.narrow(0, s.numel, s.padded - s.numel).zero_();
    work = replicas_->reduce_scatter_async(padded.view({ranks, s.chunk}), chunks_[index], ReduceOp::Mean);
    work = std::make_shared<KeepInput>(std::move(work), std::move(padded));
  }
  if (across_ && across_->size() > 1) work = std::make_shared<ThenAcross>(std::move(work), across_, chunks_[index]);
  return work;
}

}  // namespace dtrain::dist
