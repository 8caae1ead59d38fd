// CheckedCommunicator: collective-mismatch detection for a backend whose calls do not
// block the host (NCCL): each collective's record is exchanged over a second
// communicator, of CPU tensors (an MPI one, split from NCCL's bootstrap), and compared
// before the collective is issued. That exchange blocks the calling thread until every
// rank has made its call, but never waits for the GPU, so it adds no wait on the device's
// work (MPI checks its collectives itself, on its communication thread: see
// MpiCommunicator).
//
// On a mismatch every rank throws before any issues the collective, and the communicator
// stays usable. Calls are checked and issued under one mutex, in the order they are made,
// async ones at the call.
#pragma once

#include "comm/collective_record.h"
#include "dtrain/comm/communicator.h"

#include <mutex>
#include <string>

namespace dtrain::dist {

class CheckedCommunicator final : public Communicator {
 public:
  // `records` has inner's ranks and size and takes CPU tensors; `name` appears in the
  // messages ("nccl").
  CheckedCommunicator(CommunicatorPtr inner, CommunicatorPtr records, std::string name);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }

  WorkPtr all_reduce_async(Tensor& t, ReduceOp op) override;
  void all_reduce(Tensor& t, ReduceOp op) override;
  void broadcast(Tensor& t, int root) override;
  WorkPtr all_gather_async(const Tensor& in, Tensor& out) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  WorkPtr reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override;
  void barrier() override;
  // The child is checked too, over a split of `records`, named "<name>.split(<color>)".
  std::shared_ptr<Communicator> split(int color, int key) override;

  // Messages involve two ranks, which an all-gather cannot check: passed through
  // unchecked.
  WorkPtr isend(const Tensor& t, int dst, int tag) override { return inner_->isend(t, dst, tag); }
  RecvWorkPtr irecv(Tensor& t, int src, int tag) override { return inner_->irecv(t, src, tag); }
  std::vector<WorkPtr> batch_isend_irecv(const std::vector<P2POp>& ops) override {
    return inner_->batch_isend_irecv(ops);
  }
  void send(const Tensor& t, int dst, int tag) override { inner_->send(t, dst, tag); }
  void recv(Tensor& t, int src, int tag) override { inner_->recv(t, src, tag); }

 private:
  // Exchanges `call` over records_; throws the mismatch. The caller holds mutex_.
  void check(const CollectiveRecord& call);

  CommunicatorPtr inner_;
  CommunicatorPtr records_;
  std::mutex mutex_;
  CollectiveChecker checker_;
};

}  // namespace dtrain::dist
