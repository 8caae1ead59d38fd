// P2pEngine: the MPI communicator's point-to-point messages. They bypass the CommThread,
// so that a message never queues behind a long all-reduce: a send is posted (MPI_Isend) on
// the caller's thread before isend returns; a receive is matched by the progress loop,
// which probes for it (MPI_Improbe) and receives it (MPI_Imrecv) only once its size is
// known to fit, so that a message of the wrong size fails naming both sizes instead of
// being truncated. The loop runs on the threads that wait for a message and, while nobody
// waits and messages are pending, on the engine's progress thread (MPI moves a message only
// inside MPI calls, and an unmatched receive must take its message even if nobody waits
// for it yet). Both poll under a Backoff, and the progress thread sleeps when nothing is
// pending.
//
// Matching order: receives are probed in the order they were issued, and a receive is
// not probed while one issued before it that could take the same messages (same or
// wildcard source and tag) has found none, so receives match in issue order as MPI's own
// receives do.
//
// Timeout: when a message is not done within the timeout, on_timeout first receives
// "<op> (N bytes, tag T) waited S s for <peer>" (the communicator aborts the job or fails
// its collectives, per its OnTimeout); then that message fails with the report and "; the
// communicator is now unusable", every other pending message fails too, and the engine
// takes no more. A send is timed from its call; a receive from its first wait() or from
// when its message arrived, whichever came first, so that a receive posted early and not
// waited on (a mailbox from kAnySource) can stay pending for as long as it needs.
#pragma once

#include "comm/backoff.h"
#include "dtrain/comm/communicator.h"

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dtrain::dist::mpi {

class P2pEngine {
 public:
  using TimeoutHandler = std::function<void(const std::string& report)>;
  using PeerName = std::function<std::string(int rank)>;  // "rank 3" for a rank of comm

  struct Message {
    const char* op;  // "isend", "recv", "batch_isend_irecv"
    P2POp::Kind kind;
    Tensor tensor;  // contiguous, on the CPU, at most INT_MAX elements (checked by the caller)
    int peer;       // a rank of comm; for a receive also kAnySource
    int tag;        // >= 0; for a receive also kAnyTag
  };

  // Uses `comm` (not owned) until destroyed.
  P2pEngine(MPI_Comm comm, std::chrono::milliseconds timeout, PeerName peer_name, TimeoutHandler on_timeout);
  // Closes the engine (close()) and stops the progress thread.
  ~P2pEngine();
  P2pEngine(const P2pEngine&) = delete;
  P2pEngine& operator=(const P2pEngine&) = delete;

  // Issues the messages in order, sends right away; one Work per message (for a send, its
  // source() and tag() are its own destination and tag). When a send cannot be issued it
  // throws, and the messages of the call issued before it fail with the same error (see
  // withdraw_locked).
  std::vector<RecvWorkPtr> post(const std::vector<Message>& messages);

  // Blocks until one of `works` (this engine's) is done and returns its index, or
  // works.size() after `limit`; see Communicator::wait_any. Receives waited on here keep their timeout clocks
  // unstarted.
  std::size_t wait_any(const std::vector<WorkPtr>& works, std::chrono::milliseconds limit);
  // Communicator::forget_peer: the messages to and from `peer` still pending are done with
  // an error; those MPI holds a request of are abandoned (kept until exit), not timed.
  void forget(int peer);

  // Fails every pending message and refuses new ones: `report` is why (another part of
  // the communicator timed out).
  void fail(const std::string& report);
  // Refuses new messages, fails the receives that no message has matched (MPI holds
  // nothing of them) and waits for the other messages in flight, under the timeout.
  void close();

 private:
  class Op;
  struct Pass {
    bool progressed = false;  // something was matched or completed
    std::string timeout;      // the report of a message that timed out in this pass
    std::shared_ptr<Op> timed_out;
  };
  // One round of the progress loop, with mutex_ held.
  Pass progress_locked();
  bool match_receives_locked();  // whether a receive found its message
  void accept_locked(Op& op, MPI_Message message, const MPI_Status& status);
  void finish_locked(Op& op, std::exception_ptr error);
  // Fails pending_[first...] (a batch post() could not issue whole) with `error`.
  void withdraw_locked(std::size_t first, const std::exception_ptr& error);
  void fail_locked(const std::string& report, const Op* timed_out);
  void handle_timeout(std::unique_lock<std::mutex>& lock, const Pass& pass);
  // One round of a polling loop (a waiter's or the progress thread's): progress, a timeout
  // handled, or a pause when nothing moved. Called and returns with `lock` held.
  void poll_once(std::unique_lock<std::mutex>& lock, Backoff& backoff);
  // Drives the loop until `done` holds (with mutex_ held), as one of the waiters.
  template <class Done>
  void wait_until(std::unique_lock<std::mutex>& lock, Backoff backoff, Done&& done);
  void wait_for(Op& op);
  bool test(Op& op);  // one round of the loop, then whether op is done
  void run_progress_thread();
  std::string describe_peer(int peer) const;

  const MPI_Comm comm_;
  const std::chrono::milliseconds timeout_;
  const PeerName peer_name_;
  const TimeoutHandler on_timeout_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;                // the progress thread: messages pending and no waiter, or stop
  std::deque<std::shared_ptr<Op>> pending_;     // in issue order
  std::vector<std::shared_ptr<Op>> abandoned_;  // failed while MPI still held their request
  int waiters_ = 0;
  bool closed_ = false;
  bool stopping_ = false;
  bool timing_out_ = false;  // a thread is handling a timeout (until fail_locked)
  std::string failure_;      // set once: why the engine takes no more messages
  std::thread thread_;
};

}  // namespace dtrain::dist::mpi
