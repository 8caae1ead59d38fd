// The gradient reducer behind DataParallel and the parameter-server workers (private to
// dist). It owns one flat buffer per
// bucket; a grad-ready hook on every parameter copies the finished gradient into its
// slot, and a bucket whose gradients are all in is handed to the gradient exchange
// (gradient_exchange.h; by default an asynchronous all-reduce of the mean) while backward
// goes on. After finish() each parameter's gradient is a view into its bucket (the
// exchanged value), so nothing is copied back.
#pragma once

#include "dtrain/autograd/variable.h"
#include "dtrain/dist/data_parallel/gradient_exchange.h"

#include <string>
#include <utility>
#include <vector>

namespace dtrain::dist {

struct BucketParam {
  DType dtype;
  std::size_t bytes;
};

// Groups parameters (given in registration order) into buckets: walking them in reverse
// registration order (the order backward finishes them), each dtype fills its own open
// bucket until it holds at least `bucket_bytes`. Returns the buckets ordered by their
// first parameter in that walk, each listing parameter indices in walk order. Every rank
// computes the same plan from the same parameters.
std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<BucketParam>& params, std::size_t bucket_bytes);

struct ReducerOptions {
  std::size_t bucket_bytes = 4u << 20;
  bool overlap = true;      // false: start every bucket in finish()
  bool communicate = true;  // false: start none (to measure what the exchange costs)
  // false (sharded data parallelism's stage 2, whose exchange keeps what each rank needs):
  // a bucket's buffer exists from its first gradient until its exchange is done, each
  // gradient is dropped once copied into it, at most two buckets are in flight (starting a
  // third waits for the oldest), and finish() leaves the parameters without gradients.
  bool keep_buckets = true;
  // Given buckets (parameter names, DataParallelOptions::buckets) instead of assign_buckets'.
  std::vector<std::vector<std::string>> buckets = {};
};

class GradientReducer {
 public:
  // `params`: distinct named parameters that require grad, in registration order. `sync`
  // is consulted by every hook: false while a no_sync() guard lives (or, for a
  // parameter-server worker, while no push is armed). `exchange` is told the buckets'
  // layout here and then starts each full bucket.
  GradientReducer(std::vector<std::pair<std::string, Variable>> params, GradientExchangePtr exchange,
                  const ReducerOptions& options, const bool& sync);
  // Removes the hooks and waits for buckets still in flight (their buffers die here).
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  GradientExchange& exchange() const { return *exchange_; }

  // Completes the step: parameters whose hook did not fire contribute their current
  // gradient (zero after zero_grad(); under accumulation, the sum so far), the remaining
  // buckets are launched, every bucket is waited on, and each gradient becomes its
  // averaged bucket view.
  void finish();

 private:
  struct Slot {
    std::string name;
    Variable param;
    std::size_t bucket;
    std::int64_t offset;  // the parameter's first element in its bucket
    Tensor view;          // its region of the bucket, shaped like it (kept buckets only)
    bool ready = false;
  };
  struct Bucket {
    Tensor buffer;  // flat, one dtype (undefined between steps when buckets are not kept)
    std::int64_t numel = 0;
    TensorOptions options;
    std::size_t slots = 0;
    std::size_t pending = 0;  // slots not yet ready this step
    WorkPtr work;             // in flight; null when not launched or communicate is off
  };

  void on_grad_ready(std::size_t slot);
  void mark_ready(std::size_t slot);
  void launch_in_order();
  // The parameter's region of its bucket, allocating the bucket first when it is transient.
  Tensor slot_view(Slot& slot);
  // Waits for a bucket's exchange; a transient bucket's buffer goes back to the cache.
  void complete(Bucket& bucket);

  GradientExchangePtr exchange_;
  bool communicate_;
  bool keep_buckets_;
  const bool& sync_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::size_t next_launch_ = 0;  // buckets [0, next_launch_) are launched this step
};

}  // namespace dtrain::dist
