// MpiCommunicator: the Communicator over an MPI communicator, for CPU tensors. Every
// collective runs on the communicator's CommThread, under its watchdog; all_reduce runs
// MPI_Allreduce, the ring or the shared-memory algorithm (Auto: choose_all_reduce).
// Messages go through the P2pEngine instead, on the same MPI communicator (the ring and
// shared-memory algorithms use duplicates of their own, and MPI's collectives never match
// messages), issued at once rather than queued behind the collectives.
//
// OnTimeout::Throw: a timeout in either part fails the other too, so the communicator
// refuses every later call. Shutting a failed communicator down frees no MPI object (the
// peers may be gone, and freeing is collective); a collective that still has not ended
// one timeout later is left running with what it uses (its thread and algorithm objects).
#pragma once

#include "dist/comm_thread.h"
#include "dist/mpi/mpi_runtime.h"
#include "dist/mpi/p2p_engine.h"
#include "dist/mpi/ring_allreduce.h"
#include "dist/mpi/shm_allreduce.h"

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::dist::mpi {

class MpiCommunicator final : public Communicator, public Resource {
 public:
  // Takes ownership of `comm` (a fresh duplicate or split), which every member constructs
  // together: the constructor is collective.
  MpiCommunicator(MPI_Comm comm, const CommunicatorOptions& options);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  WorkPtr all_reduce_async(Tensor& t, ReduceOp op) override;
  void all_reduce(Tensor& t, ReduceOp op) override;
  void broadcast(Tensor& t, int root) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override;
  WorkPtr isend(const Tensor& t, int dst, int tag) override;
  RecvWorkPtr irecv(Tensor& t, int src, int tag) override;
  std::vector<WorkPtr> batch_isend_irecv(const std::vector<P2POp>& ops) override;
  void send(const Tensor& t, int dst, int tag) override;
  void recv(Tensor& t, int src, int tag) override;
  void barrier() override;
  std::shared_ptr<Communicator> split(int color, int key) override;

  // Stops the thread and frees the MPI objects (collective); later calls throw. Runs at
  // destruction, or before MPI_Finalize for a communicator still alive at exit.
  void shutdown() override;

 private:
  CommThread& thread(const char* op);
  // Checks the arguments and returns what all_reduce runs on the comm thread.
  std::pair<OpInfo, std::function<void()>> prepare_all_reduce(const Tensor& t, ReduceOp op);
  // The bodies that run on the comm thread. After their blocking MPI calls they use
  // nothing of `this` but the algorithm objects (see the failure note at the top).
  void all_reduce_now(const Tensor& t, ReduceOp op, AllReduceAlgorithm algorithm);
  // Checks one message and describes it for the P2pEngine; `in_batch` allows this rank as
  // the peer and refuses the wildcards.
  P2pEngine::Message message(const char* op, P2POp::Kind kind, const Tensor& t, int peer, int tag,
                             bool in_batch) const;
  P2pEngine& p2p(const char* op);
  // shutdown() of a failed communicator: stops what can be stopped, frees no MPI object.
  void abandon();
  std::string peer(int rank) const;  // "rank 3", as a rank of MPI_COMM_WORLD
  std::string waiting_for(AllReduceAlgorithm algorithm) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm host_ = MPI_COMM_NULL;  // the ranks of comm_ that share this host's memory
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;  // MPI_COMM_WORLD rank of each rank, for messages
  std::string host_peers_;        // the other ranks on this host, for messages
  bool single_host_ = true;
  CommunicatorOptions options_;
  // Created on first use, on the comm thread (their constructors are collective).
  std::unique_ptr<RingAllReduce> ring_;
  std::unique_ptr<ShmAllReduce> shm_;
  int tag_ub_ = 32767;  // MPI's largest tag here (MPI_TAG_UB; the standard's minimum until read)
  std::unique_ptr<CommThread> thread_;
  std::unique_ptr<P2pEngine> p2p_;
};

}  // namespace dtrain::dist::mpi
