// What a loop that serves many peers from one thread, and trains on without a lost one,
// needs of its communicator beyond the collectives: parameter servers wait for whichever
// worker's message comes first and drop a worker that died or stalled. Not every backend
// can (MPI can; NCCL and the single-process group cannot), so it is an interface of its
// own rather than part of every Communicator: a program asks peer_recovery(comm) and gets
// the communicator's, or an error naming the backend.
#pragma once

#include "dtrain/comm/communicator.h"

#include <chrono>
#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

namespace dtrain::dist {

class PeerRecovery {
 public:
  virtual ~PeerRecovery() = default;

  // Blocks until one of `works` (messages issued on this communicator, at least one) is
  // done and returns its index (the earliest done one); wait() on it then returns or throws
  // at once. The receives count as mailboxes, so waiting here does not start their timeout
  // clocks; while nothing arrives, the caller sleeps in steps of up to a millisecond.
  virtual std::size_t wait_any(const std::vector<WorkPtr>& works) = 0;
  // As wait_any, but returns works.size() when none is done within `limit` (a server that
  // also watches the clock: parameter servers drop a worker that has gone silent).
  virtual std::size_t wait_any_for(const std::vector<WorkPtr>& works, std::chrono::milliseconds limit) = 0;

  // Forgets every message to or from `rank` still in flight on this communicator: its
  // receives fail, its sends are left to the transport (their tensors kept until exit), and
  // none of them times out any more. Open MPI's MPI_Finalize waits for a peer that was sent
  // anything and died, so a process that forgot a peer ends without it: run_program exits
  // with the program's code directly (peer_was_lost()).
  virtual void forget_peer(int rank) = 0;
  // A communicator of `ranks` (ranks of this one, ascending, this rank among them), made
  // by those ranks alone (MPI_Comm_create_group): the others, a lost one among them, call
  // nothing. Unlike split, it does not need every rank.
  virtual std::shared_ptr<Communicator> subgroup(const std::vector<int>& ranks) = 0;
};

// `comm`'s PeerRecovery. Throws naming `what` (the caller's operation) and the backend
// when the backend has none.
PeerRecovery& peer_recovery(Communicator& comm, std::string_view what);

}  // namespace dtrain::dist
