// MpiCommunicator: the Communicator over an MPI communicator, for CPU tensors. Every
// operation runs on the communicator's CommThread, under its watchdog. all_reduce runs
// MPI_Allreduce, the ring or the shared-memory algorithm (Auto: choose_all_reduce).
#pragma once

#include "dist/comm_thread.h"
#include "dist/mpi/mpi_runtime.h"
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
  // The bodies that run on the comm thread.
  void all_reduce_now(const Tensor& t, ReduceOp op, AllReduceAlgorithm algorithm);
  void receive_now(const Tensor& t, int src, int tag, int count);
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
  std::unique_ptr<CommThread> thread_;
};

}  // namespace dtrain::dist::mpi
