// DataParallel: synchronous data-parallel training. Every rank holds a replica of the
// module; after each backward the gradients are averaged across ranks, so every replica
// takes the same optimizer step. Gradients are all-reduced in buckets, in the order they
// become ready during backward (reverse registration order), each bucket as soon as it
// is full, so that communication overlaps with the rest of backward.
//
//   dist::DataParallel ddp(model, dist::world());
//   Variable loss = cross_entropy(ddp.forward(x), y);
//   loss.backward();
//   ddp.finish_gradient_sync();   // wait for the buckets; gradients are now averaged
//   optimizer.step();
//
// After finish_gradient_sync() each gradient is a view into its bucket's memory, which the
// next synced step overwrites. forward() is the module's own forward: a loop may call the
// module directly (the hooks do the work). Convert BatchNorm layers to SyncBatchNorm
// before constructing DataParallel and the optimizer, since conversion makes new parameters.
//
// A model on a GPU (all its parameters and buffers on one CUDA device, one device per rank:
// dist::rank_cuda_device()) has its tensors communicated over NCCL: given dist::world(),
// DataParallel builds an NCCL communicator over it (dtrain/comm/nccl.h), with the same
// buckets and overlap; gradients never leave the GPU.
#pragma once

#include "dtrain/comm/communicator.h"
#include "dtrain/dist/data_parallel/gradient_exchange.h"
#include "dtrain/layers/module.h"

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

class GradientReducer;

struct DataParallelOptions {
  std::size_t bucket_bytes = 4u << 20;  // gradient bytes per all-reduce
  bool overlap = true;                  // false: all-reduce every bucket in finish_gradient_sync()
  bool communicate = true;              // false: skip all-reduce (to measure its cost); replicas diverge
  // false: each bucket lives only until its exchange is done and parameters keep no
  // gradient after finish_gradient_sync() (for an exchange that keeps what the rank needs:
  // sharded data parallelism's stage 2).
  bool keep_gradients = true;
  // The buckets by parameter name, each in the order backward finishes them, the buckets
  // in that order too; empty: filled to bucket_bytes. Sharded data parallelism's stage 3
  // makes its gather units (whole layers) its buckets.
  std::vector<std::vector<std::string>> buckets = {};
  // What each full bucket goes through (gradient_exchange.h): "all_reduce" (the mean) or a
  // registered kind.
  std::string gradient_exchange = "all_reduce";
  // When set, builds the exchange instead of the kind named above: a strategy that must
  // reach its exchange's state (sharded data parallelism's gradient shards) keeps a pointer.
  GradientExchangeFactory exchange_factory = {};
};

class DataParallel {
 public:
  // Broadcasts parameters and buffers from rank 0, after checking that every rank has the
  // same parameter names and shapes (an error names the first difference).
  DataParallel(std::shared_ptr<nn::Module> module, CommunicatorPtr comm, DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  Variable forward(const Variable& x);

  // Waits for every bucket and leaves the averaged gradient in each parameter. Parameters
  // that received no gradient this step count as zero (they get a zero gradient), so ranks
  // whose graphs differ do not hang. No-op inside no_sync().
  void finish_gradient_sync();

  // While the returned guard lives, backward accumulates local gradients without
  // communicating (gradient accumulation); the first synced step all-reduces the sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DataParallel& ddp_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  // One micro-batch's forward and backward (`body`) of an update: only the update's last
  // (`last`) hands its gradients to the exchange; the earlier ones accumulate, under no_sync().
  void run_micro_batch(bool last, const std::function<void()>& body);

  // The largest |parameter - rank 0's parameter| over all parameters and ranks (0 when the
  // replicas are identical). A collective: every rank must call it.
  double check_replicas();

  // The gradient exchange's own state (GradientExchange::state), for checkpoints.
  std::vector<std::pair<std::string, Tensor>> exchange_state() const;
  void load_exchange_state(const std::vector<std::pair<std::string, Tensor>>& state);

  nn::Module& module() { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  const CommunicatorPtr& communicator() const { return comm_; }
  // The one the model's tensors travel through: NCCL for a model on CUDA, else communicator().
  const CommunicatorPtr& tensor_communicator() const { return tensor_comm_; }
  const DataParallelOptions& options() const { return options_; }

 private:
  std::shared_ptr<nn::Module> module_;
  CommunicatorPtr comm_;
  CommunicatorPtr tensor_comm_;
  DataParallelOptions options_;
  std::unique_ptr<GradientReducer> reducer_;
  bool sync_ = true;
};

}  // namespace dtrain::dist
