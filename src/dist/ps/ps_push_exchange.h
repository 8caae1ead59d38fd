// The parameter-server worker's gradient exchange (private to dist): the same reducer as
// DataParallel's fills the buckets during backward, and a full bucket, instead of being
// all-reduced, is cut into its pieces (ps_layout.h), each copied into a host buffer with
// the learning rate, the skip flag, the number of claimed batches it trains and the
// rollback generation of the values it came from appended, and sent to the server that
// owns it. The servers' answers (the fresh values) are the worker's to receive.
#pragma once

#include "dist/ps/ps_layout.h"
#include "dtrain/dist/data_parallel/gradient_exchange.h"

#include <string>
#include <vector>

namespace dtrain::dist {

class PsPushExchange final : public GradientExchange {
 public:
  // `comm`: the parameter server's communicator (server s is rank workers + s); `layout`
  // outlives the exchange; `names`: the trainable parameters' names in registration order.
  PsPushExchange(Communicator& comm, int workers, const PsLayout& layout, std::vector<std::string> names, DType dtype);

  std::string name() const override { return "ps_push"; }
  // Finds every piece in its bucket (pieces are contiguous runs of a bucket); throws when
  // the reducer's buckets are not the layout's.
  void plan(const std::vector<BucketLayout>& buckets) override;
  // Sends the bucket's pieces; the work is done when every send is.
  WorkPtr start(std::size_t index, Tensor& buffer) override;

  // What the next pushes carry: the learning rate to apply them at, whether the servers
  // are to skip them (inf/NaN under a loss scaler) yet answer as for any push, and how
  // many claimed batches they train (async and ssp: server 0 hands out again the batches
  // a lost worker claimed and did not push), and the oldest rollback generation among the
  // values the gradient was computed from (the servers drop a push from before a rollback).
  void set_push(double lr, bool skip, std::int64_t batches, std::int64_t generation) {
    lr_ = lr;
    skip_ = skip;
    batches_ = batches;
    generation_ = generation;
  }

 private:
  Communicator& comm_;
  const int workers_;
  const PsLayout& layout_;
  const std::vector<std::string> names_;
  std::vector<std::int64_t> piece_start_;  // per piece: its first element in its bucket
  std::vector<Tensor> push_;               // per piece, in host memory
  double lr_ = 0;
  bool skip_ = false;
  std::int64_t batches_ = 0;
  std::int64_t generation_ = 0;
};

}  // namespace dtrain::dist
