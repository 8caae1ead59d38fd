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

// A 16-bit reduce-scatter: once done, its chunk cast back into the bucket's f32 chunk.
class CastChunkBack final : public Work {
 public:
  CastChunkBack(WorkPtr work, Tensor wire_chunk, Tensor chunk)
      : work_(std::move(work)), wire_chunk_(std::move(wire_chunk)), chunk_(std::move(chunk)) {}
  void wait() override {
    work_->wait();  // rethrows its failure on every call
    if (done_) return;
    chunk_.copy_(wire_chunk_);
    done_ = true;
  }

 private:
  WorkPtr work_;
  Tensor wire_chunk_, chunk_;
  bool done_ = false;
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
  wire_inputs_.clear();
  wire_chunks_.clear();
  const int ranks = replicas_->size();
  for (const BucketLayout& b : buckets) {
    shards_.push_back(shard_bucket(b, replicas_->rank(), ranks));
    const BucketShard& s = shards_.back();
    const TensorOptions options{b.dtype, device_};
    chunks_.push_back(Tensor::zeros({s.chunk}, options));
    // The 16-bit buffers, kept across steps; the input's padding stays zero.
    const bool cast = is_half(wire_) && b.dtype == DType::f32;
    wire_inputs_.push_back(cast ? Tensor::zeros({s.padded}, {wire_, device_}) : Tensor());
    wire_chunks_.push_back(cast ? Tensor::empty({s.chunk}, {wire_, device_}) : Tensor());
  }
}

WorkPtr ReduceScatterExchange::start(std::size_t index, Tensor& buffer) {
  const BucketShard& s = shards_.at(index);
  const std::int64_t ranks = replicas_->size();
  WorkPtr work;
  if (wire_inputs_.at(index).defined()) {
    // Divided before the cast (the 16-bit sum of the shares stays in one gradient's range);
    // the bucket stays as backward left it (stage 1 keeps it as the gradients).
    wire_inputs_[index].narrow(0, 0, s.numel).copy_(mul(buffer.view({s.numel}), 1.0 / static_cast<double>(ranks)));
    work =
        replicas_->reduce_scatter_async(wire_inputs_[index].view({ranks, s.chunk}), wire_chunks_[index], ReduceOp::Sum);
    work = std::make_shared<CastChunkBack>(std::move(work), wire_chunks_[index], chunks_[index]);
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
