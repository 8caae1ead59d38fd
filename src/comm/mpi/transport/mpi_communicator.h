// MpiCommunicator: the Communicator over an MPI communicator, for CPU tensors. Every
// collective runs on the communicator's CommThread, under its watchdog; all_reduce runs
// MPI_Allreduce, the ring, recursive doubling, Rabenseifner or the shared-memory
// (hierarchical) algorithm (Auto: choose_all_reduce, from the collective table);
// reduce_scatter, all_gather and broadcast run MPI's collective or P2pCollectives' (Auto:
// the same table's lists).
// Messages go through the P2pEngine instead, on the same MPI communicator (the ring and
// shared-memory algorithms use duplicates of their own, and MPI's collectives never match
// messages), issued at once rather than queued behind the collectives.
//
// Checking the collectives (CommunicatorOptions::check_collectives): each collective's body
// on the CommThread first all-gathers the call's record on the same MPI communicator and
// compares (CollectiveChecker), so the checks keep the collectives' order, and an async
// collective stays async: a mismatch fails it from its wait(), on every rank, before any
// rank has entered it.
//
// OnTimeout::Throw: a timeout in either part fails the other too, so the communicator
// refuses every later call. Shutting a failed communicator down frees no MPI object (the
// peers may be gone, and freeing is collective); a collective that still has not ended
// one timeout later is left running with what it uses (its thread and the State), so the
// bodies that run on the thread use only the State and what they captured by value,
// never the communicator itself.
#pragma once

#include "dtrain/comm/collective_table.h"
#include "dtrain/comm/peer_recovery.h"
#include "comm/collective_record.h"
#include "comm/comm_thread.h"
#include "comm/mpi/transport/mpi_runtime.h"
#include "comm/mpi/transport/p2p_engine.h"
#include "comm/mpi/algorithms/flat_allreduce.h"
#include "comm/mpi/algorithms/p2p_collectives.h"
#include "comm/mpi/algorithms/shm_allreduce.h"
#include "comm/mpi/algorithms/shm_collectives.h"

#include <mpi.h>

#include <functional>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::dist::mpi {

class MpiCommunicator final : public Communicator, public PeerRecovery, public Resource {
 public:
  // Takes ownership of `comm` (a fresh duplicate or split), which every member constructs
  // together: the constructor is collective. `name` ("world") names it in the checks'
  // messages.
  MpiCommunicator(MPI_Comm comm, const CommunicatorOptions& options, std::string name);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  // This rank's rank among the ranks of its host (split_hosts: those that share its memory,
  // or those given its DTRAIN_HOST_ID).
  int host_rank() const;

  WorkPtr all_reduce_async(Tensor& t, ReduceOp op) override;
  void all_reduce(Tensor& t, ReduceOp op) override;
  void broadcast(Tensor& t, int root) override;
  WorkPtr all_gather_async(const Tensor& in, Tensor& out) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  WorkPtr reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override;
  WorkPtr isend(const Tensor& t, int dst, int tag) override;
  RecvWorkPtr irecv(Tensor& t, int src, int tag) override;
  std::vector<WorkPtr> batch_isend_irecv(const std::vector<P2POp>& ops) override;
  std::size_t wait_any(const std::vector<WorkPtr>& works) override;
  std::size_t wait_any_for(const std::vector<WorkPtr>& works, std::chrono::milliseconds limit) override;
  void forget_peer(int rank) override;
  std::shared_ptr<Communicator> subgroup(const std::vector<int>& ranks) override;
  void send(const Tensor& t, int dst, int tag) override;
  void recv(Tensor& t, int src, int tag) override;
  void barrier() override;
  std::shared_ptr<Communicator> split(int color, int key) override;

  // Stops the thread and frees the MPI objects (collective); later calls throw. Runs at
  // destruction, or before MPI_Finalize for a communicator still alive at exit.
  void shutdown() override;

 private:
  // What the comm thread's bodies use: it outlives the communicator when a stalled body
  // is left running (see the failure note at the top).
  struct State {
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm host = MPI_COMM_NULL;  // the ranks of comm that share this host's memory
    int size = 1;
    // Created on first use, on the comm thread (their constructors are collective). Only
    // the shutdown body frees them and the communicators: otherwise they are left to
    // MPI_Finalize (freeing is collective, and MPI may be finalized already).
    std::unique_ptr<FlatAllReduce> flat;
    std::unique_ptr<ShmAllReduce> shm;
    std::unique_ptr<ShmCollectives> shm_collectives;  // reduce_scatter's, all_gather's and broadcast's
    ShmCollectives& shared_memory();                  // made on first use (collective)
    // reduce_scatter's, all_gather's and broadcast's algorithms over their own duplicate of
    // comm; unlike the three above they own no MPI object, so ~State frees them.
    MPI_Comm collectives_comm = MPI_COMM_NULL;
    std::unique_ptr<P2pCollectives> collectives;
    P2pCollectives& p2p_collectives();           // made on first use (collective)
    std::unique_ptr<CollectiveChecker> checker;  // when the collectives are checked
    ~State();
  };
  // Lets the CommThread's timeout handler reach the P2pEngine until abandon() disarms it:
  // a thread left to a stalled collective outlives the engine and the communicator.
  struct TimeoutLink {
    std::mutex mutex;
    P2pEngine* p2p = nullptr;
  };

  CommThread& thread(const char* op);
  // Checks the arguments and returns what all_reduce runs on the comm thread.
  std::pair<OpInfo, std::function<void()>> prepare_all_reduce(const Tensor& t, ReduceOp op);
  // The same for all_gather and reduce_scatter.
  std::pair<OpInfo, std::function<void()>> prepare_all_gather(const Tensor& in, const Tensor& out);
  std::pair<OpInfo, std::function<void()>> prepare_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op);
  // `body` preceded by the check of its call (op, tensor, root, reduce op) when checking
  // is on; `body` itself otherwise.
  std::function<void()> checked(std::function<void()> body, CollectiveOp op, const Tensor* t = nullptr, int root = -1,
                                int reduce = -1) const;
  // What a queued body keeps of a host tensor: its storage (alive until the body is
  // dropped) and where its bytes are. Not the Tensor: a copy of one copies its shape and
  // strides, two allocations per tensor, which were a good part of a small collective's
  // per-call cost.
  class HostBytes {
   public:
    explicit HostBytes(const Tensor& t)
        : storage_(t.storage()), data_(t.raw_data()), numel_(t.numel()), dtype_(t.dtype()) {}
    void* raw_data() const { return data_; }
    std::int64_t numel() const { return numel_; }
    DType dtype() const { return dtype_; }
    std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }

   private:
    std::shared_ptr<Storage> storage_;
    void* data_;
    std::int64_t numel_;
    DType dtype_;
  };
  static void all_reduce_now(State& state, const HostBytes& t, ReduceOp op, AllReduceChoice choice);
  // Checks one message and describes it for the P2pEngine; `in_batch` allows this rank as
  // the peer and refuses the wildcards.
  P2pEngine::Message message(const char* op, P2POp::Kind kind, const Tensor& t, int peer, int tag, bool in_batch) const;
  P2pEngine& p2p(const char* op);
  // shutdown() of a failed communicator: stops what can be stopped, frees no MPI object.
  void abandon();
  std::string peer(int rank) const;  // "rank 3", as a rank of MPI_COMM_WORLD
  std::string waiting_for(AllReduceAlgorithm algorithm) const;
  std::string waiting_for(CollectiveAlgorithm algorithm) const;
  // What reduce_scatter, all_gather or broadcast runs for a message of `bytes`: the
  // option's algorithm, or the table's choice when the option is Auto.
  CollectiveAlgorithm algorithm_for(TunedCollective which, std::size_t bytes) const;

  // Left to a stalled body by abandon() (leaked, with the thread): the bodies hold it raw.
  std::unique_ptr<State> state_;
  std::shared_ptr<TimeoutLink> link_ = std::make_shared<TimeoutLink>();
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;  // MPI_COMM_WORLD rank of each rank, for messages
  std::string host_peers_;        // the other ranks on this host, for messages
  bool single_host_ = true;
  int hosts_ = 1;                       // host groups (split_hosts) among the ranks
  bool even_hosts_ = true;              // every host holds the same number of ranks
  std::atomic<bool> lost_peer_{false};  // forget_peer was called: shutdown frees nothing (abandon)
  CommunicatorOptions options_;
  std::string name_;
  int tag_ub_ = 32767;  // MPI's largest tag here (MPI_TAG_UB; the standard's minimum until read)
  std::unique_ptr<CommThread> thread_;
  std::unique_ptr<P2pEngine> p2p_;
};

}  // namespace dtrain::dist::mpi
