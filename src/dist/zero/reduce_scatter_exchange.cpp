#include "dist/zero/reduce_scatter_exchange.h"

#include "dtrain/core/error.h"

#include <algorithm>

namespace dtrain::dist {
ReduceScatterExchange::ReduceScatterExchange(CommunicatorPtr replicas, Device device, CommunicatorPtr across,
                                             DType wire, GradientExchangePtr codec)
    : replicas_(std::move(replicas)),
      device_(device),
      across_(std::move(across)),
      wire_(wire),
      codec_(std::move(codec)) {
  DTRAIN_CHECK(wire_ == DType::f32 || is_half(wire_),
               "reduce-scatter exchange: the wire dtype must be f32, f16 or bf16, got {}", dtype_name(wire_));
  DTRAIN_CHECK(!codec_ || wire_ == DType::f32,
               "reduce-scatter exchange: the codec {} exchanges the bucket itself; it takes no {} wire", codec_->name(),
               dtype_name(wire_));
}

std::vector<std::pair<std::string, Tensor>> ReduceScatterExchange::state() const {
  return codec_ ? codec_->state() : std::vector<std::pair<std::string, Tensor>>{};
}

void ReduceScatterExchange::load_state(const std::vector<std::pair<std::string, Tensor>>& state) {
  if (codec_) codec_->load_state(state);
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
  if (codec_) codec_->plan(buckets);
}

WorkPtr ReduceScatterExchange::start(std::size_t index, Tensor& buffer) {
  const BucketShard& s = shards_.at(index);
  const std::int64_t ranks = replicas_->size();
  WorkPtr work;
  if (codec_) {
    // The codec averages the whole bucket on every rank; this rank keeps its chunk (the last
    // chunk's padding beyond the bucket stays zero).
    const std::int64_t begin = std::min<std::int64_t>(replicas_->rank() * s.chunk, s.numel);
    const std::int64_t length = std::min<std::int64_t>(s.chunk, s.numel - begin);
    work = then(codec_->start(index, buffer), [bucket = buffer, chunk = chunks_[index], begin, length]() mutable {
      if (length > 0) chunk.narrow(0, 0, length).copy_(bucket.narrow(0, begin, length));
    });
  } else if (wire_inputs_.at(index).defined()) {
    // Divided before the cast (the 16-bit sum of the shares stays in one gradient's range);
    // the bucket stays as backward left it (stage 1 keeps it as the gradients).
    wire_inputs_[index].narrow(0, 0, s.numel).copy_(mul(buffer.view({s.numel}), 1.0 / static_cast<double>(ranks)));
    work =
        replicas_->reduce_scatter_async(wire_inputs_[index].view({ranks, s.chunk}), wire_chunks_[index], ReduceOp::Sum);
    // Once done, its chunk cast back into the bucket's f32 chunk.
    work = then(std::move(work), [wire = wire_chunks_[index], chunk = chunks_[index]]() mutable { chunk.copy_(wire); });
  } else if (s.padded == s.numel) {
    work = replicas_->reduce_scatter_async(buffer.view({ranks, s.chunk}), chunks_[index], ReduceOp::Mean);
  } else {
    Tensor padded = Tensor::empty({s.padded}, buffer.options());
    padded.narrow(0, 0, s.numel).copy_(buffer);
    padded.narrow(0, s.numel, s.padded - s.numel).zero_();
    work = replicas_->reduce_scatter_async(padded.view({ranks, s.chunk}), chunks_[index], ReduceOp::Mean);
    // The padded input lives until the collective is done (on a GPU its stream reads it).
    work = then(std::move(work), [padded = std::move(padded)] {});
  }
  if (across_ && across_->size() > 1) {
    // Hybrid sharding: the chunk's mean across the groups once the group's reduce-scatter is
    // done (every rank waits on its buckets in the same order, so these pair up).
    work = then(std::move(work),
                [across = across_, chunk = chunks_[index]]() mutable { across->all_reduce(chunk, ReduceOp::Mean); });
  }
  return work;
}

}  // namespace dtrain::dist
