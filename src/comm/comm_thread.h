// CommThread: runs one communicator's collectives, one at a time in submission order, on
// a background thread, and watches over them: when an operation runs longer than the
// timeout, a sleeping watchdog thread reports it (OnTimeout::AbortJob, by default:
// abort_job with the operation, its size and the peers it waits for; OnTimeout::Throw:
// the operation fails and the thread takes no more).
//
// Every rank must run a communicator's collectives in the same order, which a single
// FIFO executor guarantees. A thread that waits on an operation the executor has not
// started yet runs it itself when the executor is idle, so a blocking collective costs
// no thread hand-off (see run()); either way the operations run one at a time, in order.
// Under OnTimeout::Throw every operation runs on the executor instead: a waiter stuck in
// MPI could not be told that its operation timed out.
#pragma once

#include "dtrain/comm/communicator.h"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace dtrain::dist {

// What the watchdog says about an operation.
struct OpInfo {
  const char* name = "";    // "all_reduce"
  std::size_t bytes = 0;    // payload size
  std::string waiting_for;  // "rank 3", "ranks 1, 2", "all ranks"
};

class CommThread {
 public:
  using TimeoutHandler = std::function<void(const std::string& message)>;

  // AbortJob: on_timeout receives "<op> (#seq, N bytes) waited T s for <peers>; aborting the
  // job"; the default passes it to abort_job, which ends the job (only MPI communicators
  // have a CommThread).
  // Throw: the stalled operation's wait() throws "<op> (#seq, N bytes) waited T s for
  // <peers>; the communicator is now unusable", what is queued behind it and every later
  // submission throws "<op>: the communicator is unusable: <that report>", and on_timeout
  // (if given) receives the report first, so that the owner can fail its other parts
  // before any waiter learns of the failure.
  explicit CommThread(std::chrono::milliseconds timeout, TimeoutHandler on_timeout = {},
                      OnTimeout policy = OnTimeout::AbortJob);
  // Runs what is still queued, then stops both threads: it waits for the running
  // operation, so a failed owner first checks wait_idle().
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `body`; the returned Work's wait() rethrows what body threw, prefixed by the
  // operation's name.
  WorkPtr submit(OpInfo info, std::function<void()> body);
  // submit(...)->wait() without waking the thread: when nothing is queued or running, body
  // runs right here. Waking a sleeping thread costs more than a small collective (measured:
  // a 4 KB all-reduce took 0.5 us inline and 0.5-5 us through a hand-off, 2 ranks).
  void run(OpInfo info, std::function<void()> body);

  // Fails the queued operations and refuses new ones, as after a timeout under Throw:
  // `report` is why (another part of the communicator timed out). The running operation
  // goes on under the watchdog.
  void fail(const std::string& report);
  bool failed() const;
  // Whether no operation runs, waiting up to `limit` for the running one to end.
  bool wait_idle(std::chrono::milliseconds limit);

 private:
  class Task;
  std::shared_ptr<Task> enqueue(OpInfo info, std::function<void()> body, bool wake);
  void run_worker();
  void run_watchdog();
  // Runs the front task with mutex_ held on entry and exit (released while it runs).
  void run_front(std::unique_lock<std::mutex>& lock);
  void wait_for(Task& task);
  void fail_locked(const std::string& report);

  const std::chrono::milliseconds timeout_;
  const TimeoutHandler on_timeout_;
  const OnTimeout policy_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;      // worker: a task can start, or stop
  std::condition_variable done_cv_;      // waiters: a task finished
  std::condition_variable watchdog_cv_;  // watchdog: stop
  std::deque<std::shared_ptr<Task>> queue_;
  std::shared_ptr<Task> running_;  // kept alive for the watchdog's report
  std::chrono::steady_clock::time_point running_since_;
  std::uint64_t submitted_ = 0;
  bool stopping_ = false;       // no more submissions; the worker leaves when the queue is empty
  bool watchdog_stop_ = false;  // set once nothing runs any more
  std::string failure_;         // Throw: the report of the timeout; then nothing more runs
  bool halted_ = false;         // Throw: a timeout is being reported; no task may start
  std::thread worker_;
  std::thread watchdog_;
};

}  // namespace dtrain::dist
