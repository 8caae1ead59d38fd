// GradientExchange: what happens to a bucket of gradients once backward has filled it.
// DataParallel's reducer owns the buckets (flat buffers of one dtype, filled by gradient
// hooks in the order backward finishes them) and hands each full bucket to its exchange,
// in the same order on every rank; the exchange starts the communication and returns the
// work to wait for. When that work is done, the bucket holds what each parameter's
// gradient becomes (for the default, the mean over the replicas).
//
// Built in: "all_reduce" (the mean by all_reduce_async, the default). New kinds, such as a
// reduce-scatter into a shard (sharded data parallelism) or a compressed all-reduce, are a
// class and one registration line:
//
//   class F64Mean final : public dist::GradientExchange { ... };
//   dist::register_gradient_exchange("f64_mean", [](const dist::CommunicatorPtr& replicas) {
//     return std::make_unique<F64Mean>(replicas);
//   });
//   dist::DataParallel ddp(model, world, {.gradient_exchange = "f64_mean"});
//
// An exchange runs on the training thread (start) and may keep state across steps (error
// feedback, shards); it is built once per DataParallel, over the communicator of the
// model's tensors (NCCL for a model on a GPU).
#pragma once

#include "dtrain/dist/comm/communicator.h"

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::dist {

// One bucket as the reducer lays it out: its parameters' regions in launch order.
struct BucketLayout {
  struct Member {
    std::string name;         // the parameter's name in the module
    Shape shape;              // the parameter's shape
    std::int64_t offset = 0;  // first element in the bucket
  };
  DType dtype = DType::f32;
  std::int64_t numel = 0;
  std::vector<Member> members;
};

class GradientExchange {
 public:
  virtual ~GradientExchange() = default;
  virtual std::string name() const = 0;
  // Once, before the first bucket: every bucket the reducer will start, by index, so that
  // an exchange can size its buffers or state. The default keeps nothing.
  virtual void plan(const std::vector<BucketLayout>& /*buckets*/) {}
  // Starts the exchange of bucket `index`, whose gradients are all in `buffer` (flat,
  // contiguous, on the model's device). `buffer` stays alive and untouched until the
  // returned work has been waited on; then it holds the exchanged gradients.
  virtual WorkPtr start(std::size_t index, Tensor& buffer) = 0;
};
using GradientExchangePtr = std::unique_ptr<GradientExchange>;

// Builds an exchange over the replicas' communicator.
using GradientExchangeFactory = std::function<GradientExchangePtr(const CommunicatorPtr& replicas)>;

// Adds (or replaces) the kind `name`. Thread-safe; normally called once at start-up.
void register_gradient_exchange(const std::string& name, GradientExchangeFactory factory);
// Builds the kind `name`; throws naming the known kinds when there is none of that name.
GradientExchangePtr make_gradient_exchange(std::string_view name, const CommunicatorPtr& replicas);
// The registered kinds, sorted.
std::vector<std::string> gradient_exchange_names();

}  // namespace dtrain::dist
