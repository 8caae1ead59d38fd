// CommThread: runs one communicator's operations, one at a time in submission order, on a
// background thread, and watches over them: when an operation runs longer than the
// timeout, a sleeping watchdog thread reports it (by default: abort_job with the
// operation, its size and the peers it waits for).
//
// Every rank must run a communicator's operations in the same order, which a single
// FIFO executor guarantees. A thread that waits on an operation the executor has not
// started yet runs it itself when the executor is idle, so a blocking collective costs
// no thread hand-off (see run()); either way the operations run one at a time, in order.
#pragma once

#include "dtrain/dist/communicator.h"

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

  // on_timeout receives "<op> (#seq, N bytes) waited T s for <peers>; aborting the job";
  // the default passes it to abort_job, which ends the job (only MPI communicators have
  // a CommThread).
  explicit CommThread(std::chrono::milliseconds timeout, TimeoutHandler on_timeout = {});
  ~CommThread();  // runs what is still queued, then stops both threads
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `body`; the returned Work's wait() rethrows what body threw, prefixed by the
  // operation's name.
  WorkPtr submit(OpInfo info, std::function<void()> body);
  // submit(...)->wait() without waking the thread: when nothing is queued or running, body
  // runs right here. Waking a sleeping thread costs more than a small collective (measured:
  // a 4 KB all-reduce took 0.5 us inline and 0.5-5 us through a hand-off, 2 ranks).
  void run(OpInfo info, std::function<void()> body);

 private:
  class Task;
  std::shared_ptr<Task> enqueue(OpInfo info, std::function<void()> body, bool wake);
  void run_worker();
  void run_watchdog();
  // Runs the front task with mutex_ held on entry and exit (released while it runs).
  void run_front(std::unique_lock<std::mutex>& lock);
  void wait_for(Task& task);

  const std::chrono::milliseconds timeout_;
  const TimeoutHandler on_timeout_;
  std::mutex mutex_;
  std::condition_variable work_cv_;      // worker: a task can start, or stop
  std::condition_variable done_cv_;      // waiters: a task finished
  std::condition_variable watchdog_cv_;  // watchdog: stop
  std::deque<std::shared_ptr<Task>> queue_;
  const Task* running_ = nullptr;
  std::chrono::steady_clock::time_point running_since_;
  std::uint64_t submitted_ = 0;
  bool stopping_ = false;       // no more submissions; the worker leaves when the queue is empty
  bool watchdog_stop_ = false;  // set once nothing runs any more
  std::thread worker_;
  std::thread watchdog_;
};

}  // namespace dtrain::dist
