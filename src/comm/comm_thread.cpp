#include "comm/comm_thread.h"

#include "dtrain/core/error.h"
#include "dtrain/core/trace.h"

#include <atomic>
#include <exception>

#include <pthread.h>
#include <sys/prctl.h>

namespace dtrain::dist {

class CommThread::Task final : public Work {
 public:
  Task(CommThread& owner, OpInfo info, std::uint64_t seq, std::function<void()> body)
      : owner(owner), info(std::move(info)), seq(seq), body(std::move(body)) {}

  void wait() override {
    // A finished task never touches its owner again, so waiting on it stays valid after
    // the communicator is gone.
    if (!done.load(std::memory_order_acquire)) owner.wait_for(*this);
    if (error) std::rethrow_exception(error);
  }

  CommThread& owner;
  const OpInfo info;
  const std::uint64_t seq;
  std::function<void()> body;
  // Written under the owner's mutex: by the task's runner, or (Throw) by the watchdog while
  // the task still runs, which the runner then leaves as it is.
  std::exception_ptr error;
  std::atomic<bool> done{false};
};

namespace {
CommThread::TimeoutHandler default_handler(OnTimeout policy) {
  if (policy == OnTimeout::Throw) return [](const std::string&) {};
  return [](const std::string& m) { abort_job(m); };
}
}  // namespace

CommThread::CommThread(std::chrono::milliseconds timeout, TimeoutHandler on_timeout, OnTimeout policy)
    : timeout_(timeout), on_timeout_(on_timeout ? std::move(on_timeout) : default_handler(policy)), policy_(policy) {
  DTRAIN_CHECK(timeout.count() > 0, "communicator: the timeout must be positive, got {} ms", timeout.count());
  worker_ = std::thread([this] { run_worker(); });
  watchdog_ = std::thread([this] { run_watchdog(); });
}

CommThread::~CommThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_one();
  worker_.join();  // the worker leaves once the queue is empty
  {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return running_ == nullptr; });  // a waiter may run the last task
    watchdog_stop_ = true;
  }
  watchdog_cv_.notify_one();
  watchdog_.join();
}

WorkPtr CommThread::submit(OpInfo info, std::function<void()> body) {
  return enqueue(std::move(info), std::move(body), true);
}

void CommThread::run(OpInfo info, std::function<void()> body) {
  // Whoever runs the task before it, or this thread when the executor is idle, runs it
  // (AbortJob); under Throw the executor does.
  enqueue(std::move(info), std::move(body), policy_ == OnTimeout::Throw)->wait();
}

void CommThread::fail(const std::string& report) {
  {
    std::lock_guard lock(mutex_);
    fail_locked(report);
  }
  done_cv_.notify_all();
}

bool CommThread::failed() const {
  std::lock_guard lock(mutex_);
  return !failure_.empty();
}

bool CommThread::wait_idle(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  return done_cv_.wait_for(lock, limit, [&] { return running_ == nullptr; });
}

void CommThread::fail_locked(const std::string& report) {
  if (!failure_.empty()) return;
  failure_ = report;
  for (auto& task : queue_) {
    task->error =
        std::make_exception_ptr(Error(fmt::format("{}: the communicator is unusable: {}", task->info.name, report)));
    task->body = nullptr;
    task->done.store(true, std::memory_order_release);
  }
  queue_.clear();
}

std::shared_ptr<CommThread::Task> CommThread::enqueue(OpInfo info, std::function<void()> body, bool wake) {
  std::unique_lock lock(mutex_);
  DTRAIN_CHECK(failure_.empty(), "{}: the communicator is unusable: {}", info.name, failure_);
  DTRAIN_CHECK(!stopping_, "{}: the communicator is shutting down", info.name);
  auto task = std::make_shared<Task>(*this, std::move(info), ++submitted_, std::move(body));
  queue_.push_back(task);
  // Whoever runs a task starts the next one, so only an idle executor needs waking.
  wake = wake && running_ == nullptr;
  lock.unlock();
  if (wake) work_cv_.notify_one();
  return task;
}

void CommThread::run_front(std::unique_lock<std::mutex>& lock) {
  std::shared_ptr<Task> task = std::move(queue_.front());
  queue_.pop_front();
  running_ = task;
  running_since_ = std::chrono::steady_clock::now();
  lock.unlock();
  std::exception_ptr error;
  try {
    // On whichever thread runs it: the executor, or a waiter that ran it inline.
    trace::Span span(task->info.name, "communication", static_cast<std::int64_t>(task->info.bytes));
    task->body();
  } catch (const Error& e) {
    error = std::make_exception_ptr(Error(fmt::format("{}: {}", task->info.name, e.message())));
  } catch (...) {
    error = std::current_exception();
  }
  task->body = nullptr;  // drop the captured tensors now, not when the last handle goes
  lock.lock();
  if (!task->error) task->error = error;  // else the watchdog failed it while it ran
  running_ = nullptr;
  task->done.store(true, std::memory_order_release);
  done_cv_.notify_all();
  if (!queue_.empty()) work_cv_.notify_one();
}

void CommThread::wait_for(Task& task) {
  std::unique_lock lock(mutex_);
  // A task the watchdog has failed (Throw) has its error while it still runs.
  while (!task.done.load(std::memory_order_relaxed) && !task.error) {
    if (policy_ == OnTimeout::AbortJob && running_ == nullptr && !queue_.empty()) {
      run_front(lock);  // the executor is idle: run the next task (ours or one before it) here
    } else {
      done_cv_.wait(lock);
    }
  }
}

void CommThread::run_worker() {
  pthread_setname_np(pthread_self(), "dtrain-comm");
  trace::name_thread("communication thread");
  // Backoff sleeps of 20-200 us would otherwise be stretched by the default 50 us timer slack.
  prctl(PR_SET_TIMERSLACK, 5'000UL, 0UL, 0UL, 0UL);
  std::unique_lock lock(mutex_);
  for (;;) {
    work_cv_.wait(
        lock, [&] { return (running_ == nullptr && !queue_.empty() && !halted_) || (stopping_ && queue_.empty()); });
    if (queue_.empty()) return;
    run_front(lock);
  }
}

void CommThread::run_watchdog() {
  pthread_setname_np(pthread_self(), "dtrain-watchdog");
  std::unique_lock lock(mutex_);
  while (!watchdog_stop_) {
    auto now = std::chrono::steady_clock::now();
    if (running_ != nullptr && now - running_since_ >= timeout_) {
      const Task& task = *running_;
      std::chrono::duration<double> waited = now - running_since_;
      std::string report = fmt::format("{} (#{}, {} bytes) waited {:.1f} s for {}", task.info.name, task.seq,
                                       task.info.bytes, waited.count(), task.info.waiting_for);
      if (policy_ == OnTimeout::AbortJob) {
        lock.unlock();
        on_timeout_(report + "; aborting the job");
        return;  // one report per communicator: the default handler does not even return
      }
      // The owner fails its other parts first, so that a waiter that learns of the failure
      // finds the whole communicator failed. The task goes on running (MPI cannot cancel
      // it); its waiters get the error unless it has ended meanwhile.
      // Nothing starts from here on: a task that started while on_timeout_ runs (the stalled
      // one having ended meanwhile) would have no watchdog, and its waiter could hang.
      std::shared_ptr<Task> stalled = running_;
      halted_ = true;
      lock.unlock();
      on_timeout_(report);
      lock.lock();
      if (!stalled->done.load(std::memory_order_relaxed)) {
        stalled->error = std::make_exception_ptr(Error(report + "; the communicator is now unusable"));
      }
      fail_locked(report);
      lock.unlock();
      done_cv_.notify_all();
      work_cv_.notify_one();  // a stopping worker waits for the queue it can no longer run
      return;
    }
    // Sleeps until the running task's deadline; an operation that starts meanwhile has a
    // later deadline, so nobody needs to wake the watchdog when one starts.
    watchdog_cv_.wait_until(lock, running_ != nullptr ? running_since_ + timeout_ : now + timeout_);
  }
}

}  // namespace dtrain::dist
