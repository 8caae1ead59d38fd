#include "dtrain/core/parallel.h"

#include "dtrain/core/environment.h"
#include "dtrain/core/error.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace dtrain {
namespace {

thread_local bool t_in_parallel = false;

int default_threads() {
  if (auto n = env::get_int("DTRAIN_NUM_THREADS")) {
    DTRAIN_CHECK(*n >= 1, "environment variable DTRAIN_NUM_THREADS={}: expected an integer >= 1", *n);
    return static_cast<int>(*n);
  }
  return std::max(1, env::hardware_threads() / env::local_world_size());
}

// Waits up to kSpin for `ready`, polling: a training step runs its parallel ops back to
// back, microseconds apart, and a worker that went to sleep on a condition variable takes
// tens of microseconds to wake (more than a small GEMM takes). Past kSpin the waiter
// blocks, so an idle pool costs nothing; on shared vCPUs a pool that kept spinning would
// steal the core its peers need (DESIGN.md).
constexpr auto kSpin = std::chrono::microseconds(50);

template <class Ready>
bool spin_until(Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

// A pool of workers that spin briefly, then block. One job at a time: the job is split
// into `parts` ranges, worker i runs part i+1 and the caller runs part 0.
class Pool {
 public:
  ~Pool() { resize(0); }

  void resize(int workers) {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_start_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    stop_ = false;
    // New workers must wait for the next job, not re-run the last one.
    const std::uint64_t current = generation_.load();
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i, current] { worker(i + 1, current); });
  }

  std::mutex& job_mutex() { return job_mu_; }

  // Caller holds job_mutex().
  void run(std::int64_t begin, std::int64_t end, int parts, detail::RangeFn fn, void* ctx) {
    {
      std::lock_guard lock(mu_);
      begin_ = begin;
      end_ = end;
      parts_ = parts;
      fn_ = fn;
      ctx_ = ctx;
      pending_.store(parts - 1, std::memory_order_relaxed);
      error_ = nullptr;
      generation_.fetch_add(1, std::memory_order_release);  // publishes the fields above to spinners
    }
    cv_start_.notify_all();
    run_part(0);
    if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock lock(mu_);
      cv_done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    std::lock_guard lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void run_part(int part) {
    std::int64_t n = end_ - begin_;
    std::int64_t b = begin_ + n * part / parts_;
    std::int64_t e = begin_ + n * (part + 1) / parts_;
    if (b >= e) return;
    t_in_parallel = true;
    try {
      fn_(ctx_, b, e);
    } catch (...) {
      std::lock_guard lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    t_in_parallel = false;
  }

  void worker(int index, std::uint64_t seen) {
    for (;;) {
      auto started = [&] { return stop_.load() || generation_.load(std::memory_order_acquire) != seen; };
      if (!spin_until(started)) {
        std::unique_lock lock(mu_);
        cv_start_.wait(lock, started);
      }
      int parts = 0;
      {
        // A worker left out of the last job may lag behind the caller, who may be writing
        // the next job's fields right now: read the job under the lock.
        std::lock_guard lock(mu_);
        if (stop_) return;
        seen = generation_.load(std::memory_order_relaxed);
        parts = parts_;
      }
      // The job cannot finish, nor its fields change, until this worker has run its part.
      if (index >= parts) continue;
      run_part(index);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard lock(mu_);  // the caller checks pending_ under mu_ before it sleeps
        cv_done_.notify_one();
      }
    }
  }

  std::mutex job_mu_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_ = false;
  std::atomic<std::uint64_t> generation_ = 0;
  std::int64_t begin_ = 0, end_ = 0;
  int parts_ = 1;
  std::atomic<int> pending_ = 0;
  detail::RangeFn fn_ = nullptr;
  void* ctx_ = nullptr;
  std::exception_ptr error_;
};

std::atomic<int> g_threads{0};

Pool& pool() {
  static Pool p;
  return p;
}

int threads_now() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    int expected = 0;
    g_threads.compare_exchange_strong(expected, default_threads());
    n = g_threads.load();
  }
  return n;
}

}  // namespace

int num_threads() { return threads_now(); }

void set_num_threads(int n) {
  DTRAIN_CHECK(n >= 1, "set_num_threads({}): expected at least 1 thread", n);
  std::lock_guard lock(pool().job_mutex());
  g_threads.store(n);
}

bool in_parallel_region() { return t_in_parallel; }

namespace detail {
void parallel_run(std::int64_t begin, std::int64_t end, std::int64_t grain, RangeFn fn, void* ctx) {
  std::unique_lock lock(pool().job_mutex(), std::try_to_lock);
  int threads = threads_now();
  std::int64_t max_parts = std::max<std::int64_t>(1, (end - begin) / grain);  // each part >= grain
  int parts = static_cast<int>(std::min<std::int64_t>(threads, max_parts));
  if (!lock.owns_lock() || parts <= 1) {  // pool busy with another thread's job: run inline
    fn(ctx, begin, end);
    return;
  }
  static int pool_workers = 0;
  if (pool_workers != threads - 1) {
    pool().resize(threads - 1);
    pool_workers = threads - 1;
  }
  pool().run(begin, end, parts, fn, ctx);
}
}  // namespace detail

}  // namespace dtrain
