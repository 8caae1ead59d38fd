#include "dist/data_parallel/cast_exchange.h"

#include "dtrain/core/error.h"

#include <utility>
#include <vector>

namespace dtrain::dist {
namespace {

class CastAllReduce final : public GradientExchange {
 public:
  CastAllReduce(CommunicatorPtr replicas, DType wire) : replicas_(std::move(replicas)), wire_dtype_(wire) {}
  std::string name() const override { return wire_dtype_ == DType::f16 ? "fp16" : "bf16"; }
  void plan(const std::vector<BucketLayout>& buckets) override { wires_.resize(buckets.size()); }

  WorkPtr start(std::size_t index, Tensor& buffer) override {
    if (!is_floating(buffer.dtype()) || is_half(buffer.dtype())) {
      return replicas_->all_reduce_async(buffer, ReduceOp::Mean);
    }
    if (index >= wires_.size()) wires_.resize(index + 1);
    Tensor& wire = wires_[index];  // kept across steps: one allocation per bucket
    if (!wire.defined() || wire.numel() != buffer.numel() || wire.device() != buffer.device()) {
      wire = Tensor::empty({buffer.numel()}, {wire_dtype_, buffer.device()});
    }
    // Divided before the cast, as PyTorch's hook does: the sum of the 16-bit shares then
    // stays within the range of one replica's gradient.
    Tensor flat = buffer.view({buffer.numel()});
    if (!share_.defined() || share_.device() != buffer.device() || share_.dtype() != buffer.dtype()) {
      share_ = Tensor::full({}, 1.0 / replicas_->size(), {buffer.dtype(), buffer.device()});
    }
    binary_out(BinaryOp::Mul, flat, share_, flat);  // in place: no bucket-sized temporary
    wire.copy_(flat);
    // Once summed, cast back into the bucket.
    return then(replicas_->all_reduce_async(wire, ReduceOp::Sum), [wire, flat]() mutable { flat.copy_(wire); });
  }

 private:
  CommunicatorPtr replicas_;
  DType wire_dtype_;
  std::vector<Tensor> wires_;
  Tensor share_;  // 1 / replicas, a scalar of the buckets' dtype and device
};

}  // namespace

GradientExchangePtr make_cast_exchange(const CommunicatorPtr& replicas, DType wire) {
  DTRAIN_CHECK(is_half(wire), "cast gradient exchange: the wire dtype must be f16 or bf16, got {}", dtype_name(wire));
  return std::make_unique<CastAllReduce>(replicas, wire);
}

}  // namespace dtrain::dist
