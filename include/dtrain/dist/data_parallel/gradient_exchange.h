// GradientExchange: what happens to a bucket of gradients once backward has filled it.
// DataParallel's reducer owns the buckets (flat buffers of one dtype, filled by gradient
// hooks in the order backward finishes them) and hands each full bucket to its exchange,
// in the same order on every rank; the exchange starts the communication and returns the
// work to wait for. When that work is done, the bucket holds what each parameter's
// gradient becomes (for the default, the mean over the replicas).
//
// Built in:
// - "all_reduce": the mean by all_reduce_async (the default).
// - "fp16", "bf16": each bucket is divided by the replica count, cast to 16 bits, summed over
//   the replicas in 16 bits (half the bytes on the wire) and cast back (PyTorch DDP's
//   fp16/bf16 compression hooks). An inf or NaN stays one, so a loss scaler still sees an
//   overflow; fp16 also overflows above 65504, which a dynamic loss scale backs off from.
// - "powersgd:R[:W]": PowerSGD (Vogels et al. 2019, as PyTorch's powerSGD_hook): each
//   weight matrix (rows = the first dimension) that rank R shrinks at least 2x goes as two
//   all-reduced factors P (rows x R) and Q (cols x R) from one power-iteration step, Q kept
//   from the step before (warm start), what the factors miss carried to the next step
//   (error feedback); vectors and small matrices are averaged as they are. The first W
//   steps (default 100) are plain all-reduces. See src/dist/data_parallel/powersgd_exchange.h.
//
// A kind's name may carry options after a colon ("powersgd:4:10"): make_gradient_exchange
// hands the text after the first colon to the kind's factory. New kinds, such as a
// reduce-scatter into a shard (sharded data parallelism) or another compression, are a
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

#include "dtrain/comm/communicator.h"

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
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
  // What a resumed job needs to go on exactly as if never stopped (PowerSGD's error
  // feedback and warm start), this rank's own: every rank saves its state with each
  // checkpoint (CheckpointPlan::rank_state) and takes it back when the job resumes on the
  // same ranks. Called between steps, after plan(). The default keeps nothing.
  virtual std::vector<std::pair<std::string, Tensor>> state() const { return {}; }
  virtual void load_state(const std::vector<std::pair<std::string, Tensor>>& /*state*/) {}
};
using GradientExchangePtr = std::unique_ptr<GradientExchange>;

// Builds an exchange over the replicas' communicator.
using GradientExchangeFactory = std::function<GradientExchangePtr(const CommunicatorPtr& replicas)>;
// The same for a kind with options: `options` is the text after the name's first colon ("" without one).
using ConfigurableGradientExchangeFactory =
    std::function<GradientExchangePtr(const CommunicatorPtr& replicas, std::string_view options)>;

// Adds (or replaces) the kind `name` (no colon in it). Thread-safe; normally called once at
// start-up. A kind registered without options refuses any.
void register_gradient_exchange(const std::string& name, GradientExchangeFactory factory);
void register_gradient_exchange(const std::string& name, ConfigurableGradientExchangeFactory factory);
// Builds the kind `spec` names ("name" or "name:options"); throws naming the known kinds
// when there is none of that name.
GradientExchangePtr make_gradient_exchange(std::string_view spec, const CommunicatorPtr& replicas);
// The registered kinds, sorted.
std::vector<std::string> gradient_exchange_names();

}  // namespace dtrain::dist
