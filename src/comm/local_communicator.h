// LocalCommunicator: the single-process group (no launcher, or a split that leaves one
// rank alone). Every collective is the identity; there is no peer to send to, except
// itself in a batch, where each send is copied into the batch's receive with its tag. It
// never moves data between processes, so it takes tensors on any device.
#pragma once

#include "dtrain/comm/communicator.h"

namespace dtrain::dist {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }

  WorkPtr all_reduce_async(Tensor& t, ReduceOp op) override;
  void broadcast(Tensor& t, int root) override;
  WorkPtr all_gather_async(const Tensor& in, Tensor& out) override;
  WorkPtr reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override;
  WorkPtr isend(const Tensor& t, int dst, int tag) override;
  RecvWorkPtr irecv(Tensor& t, int src, int tag) override;
  std::vector<WorkPtr> batch_isend_irecv(const std::vector<P2POp>& ops) override;
  void send(const Tensor& t, int dst, int tag) override;
  void recv(Tensor& t, int src, int tag) override;
  void barrier() override {}
  std::shared_ptr<Communicator> split(int color, int key) override;
};

}  // namespace dtrain::dist
