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

// How long a waiting thread polls before it blocks: workers waiting for the next job,
// and the caller waiting for the last part of its own. A training step runs its parallel
// ops back to back, mostly microseconds apart, but some serial stretches between them
// (a small GEMM, the loss, the optimizer's bookkeeping) last 50-200 us, and a worker that
// went to sleep takes about 0.25 ms to wake on these VMs: with a 50 us poll the MLP step
// at 2 threads slept 4 times a step and ran 15-20% slower than with 500 us. So while the
// pool's threads times the ranks on this host fit its hardware threads, poll up to 500
// us. When they outnumber them a polling thread holds a core that a runnable one needs
// (spinning pools collapse on shared vCPUs), so poll only 50 us. Threads the pool does not
// own (data loaders, communication) still compete with a polling worker for up to the
// poll; DTRAIN_SPIN_US sets it for both cases (0: block at once). Past the poll the
// thread blocks, and an idle pool costs nothing.
std::atomic<std::int64_t> g_spin_us{50};

std::int64_t spin_us_for(int threads) {
  if (auto us = env::spin_us_override()) return *us;
  static const int hardware = env::hardware_threads();
  static const int ranks = env::local_world_size();
  return static_cast<std::int64_t>(threads) * ranks <= hardware ? 500 : 50;
}

template <class Ready>
bool spin_until(Ready ready) {
  const std::int64_t spin_us = g_spin_us.load(std::memory_order_relaxed);
  if (spin_us == 0) return ready();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
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

// A pool of workers that spin briefly, then block. One job at a time, split into `parts`
// fixed ranges that the caller and the workers claim one by one until none is left: when
// a worker is slow to start (its vCPU is busy elsewhere), the caller runs its part too
// instead of waiting for it. Which thread runs a part never changes the result.
class Pool {
 public:
  // Parts of one job: they are counted in 16 bits of the claim word.
  static constexpr int kMaxParts = 0xffff;

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
    const std::uint32_t current = generation_.load();
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, current] { worker(current); });
  }

  std::mutex& job_mutex() { return job_mu_; }

  // Caller holds job_mutex(); 2 <= parts <= kMaxParts.
  void run(std::int64_t begin, std::int64_t end, int parts, detail::RangeFn fn, void* ctx) {
    std::uint32_t gen = 0;
    {
      std::lock_guard lock(mu_);
      begin_ = begin;
      end_ = end;
      parts_ = parts;
      fn_ = fn;
      ctx_ = ctx;
      error_ = nullptr;
      done_.store(0, std::memory_order_relaxed);
      gen = generation_.load(std::memory_order_relaxed) + 1;
      // The release stores publish the fields above to whoever claims a part of this job.
      claim_.store(pack(gen, static_cast<std::uint32_t>(parts), 0), std::memory_order_release);
      generation_.store(gen, std::memory_order_release);
    }
    cv_start_.notify_all();
    work(gen);
    auto finished = [this, parts] { return done_.load(std::memory_order_acquire) == parts; };
    if (!spin_until(finished)) {
      std::unique_lock lock(mu_);
      cv_done_.wait(lock, finished);
    }
    std::lock_guard lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // The claim word: the job's generation, its part count and the next unclaimed part.
  static std::uint64_t pack(std::uint32_t gen, std::uint32_t parts, std::uint32_t next) {
    return (std::uint64_t{gen} << 32) | (std::uint64_t{parts} << 16) | next;
  }

  // Takes the next part of job `gen`; false when none is left or a newer job started.
  // Once a part is claimed the job cannot finish, so its fields stay put until it is done.
  bool claim(std::uint32_t gen, int& part) {
    std::uint64_t word = claim_.load(std::memory_order_acquire);
    for (;;) {
      const auto parts = static_cast<std::uint32_t>((word >> 16) & 0xffff), next = static_cast<std::uint32_t>(word & 0xffff);
      if (static_cast<std::uint32_t>(word >> 32) != gen || next >= parts) return false;
      if (claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        part = static_cast<int>(next);
        return true;
      }
    }
  }

  void work(std::uint32_t gen) {
    int part = 0;
    while (claim(gen, part)) {
      run_part(part);
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == parts_) {
        std::lock_guard lock(mu_);  // the caller checks done_ under mu_ before it sleeps
        cv_done_.notify_one();
      }
    }
  }

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

  void worker(std::uint32_t seen) {
    for (;;) {
      auto started = [&] { return stop_.load() || generation_.load(std::memory_order_acquire) != seen; };
      if (!spin_until(started)) {
        std::unique_lock lock(mu_);
        cv_start_.wait(lock, started);
      }
      if (stop_.load()) return;
      seen = generation_.load(std::memory_order_acquire);
      work(seen);  // claims nothing if the caller (or another worker) already took every part
    }
  }

  std::mutex job_mu_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_ = false;
  std::atomic<std::uint32_t> generation_ = 0;
  std::atomic<std::uint64_t> claim_ = 0;
  std::atomic<int> done_ = 0;
  std::int64_t begin_ = 0, end_ = 0;
  int parts_ = 1;
  detail::RangeFn fn_ = nullptr;
  void* ctx_ = nullptr;
  std::exception_ptr error_;
};

std::atomic<int> g_threads{0};

Pool& pool() {
  static Pool p;
  return p;
}

// The thread count and its poll change together, under this lock: the first use takes
// the defaults, set_num_threads replaces both. Taken before the pool's job mutex, never
// after it.
std::mutex g_config_mu;

int threads_now() {
  int n = g_threads.load(std::memory_order_acquire);
  if (n != 0) return n;
  std::lock_guard lock(g_config_mu);
  n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = default_threads();
    g_spin_us.store(spin_us_for(n));
    g_threads.store(n, std::memory_order_release);
  }
  return n;
}

}  // namespace

int num_threads() { return threads_now(); }

void set_num_threads(int n) {
  DTRAIN_CHECK(n >= 1, "set_num_threads({}): expected at least 1 thread", n);
  const std::int64_t spin = spin_us_for(n);
  std::lock_guard config(g_config_mu);
  std::lock_guard lock(pool().job_mutex());  // not while a job runs
  g_spin_us.store(spin);
  g_threads.store(n, std::memory_order_release);
}

std::int64_t pool_spin_us() {
  threads_now();  // the first call settles the default
  return g_spin_us.load();
}

bool in_parallel_region() { return t_in_parallel; }

namespace detail {
void parallel_run(std::int64_t begin, std::int64_t end, std::int64_t grain, RangeFn fn, void* ctx) {
  const int threads = threads_now();  // before the job mutex: it may take g_config_mu
  std::unique_lock lock(pool().job_mutex(), std::try_to_lock);
  std::int64_t max_parts = std::max<std::int64_t>(1, (end - begin) / grain);  // each part >= grain
  int parts = static_cast<int>(std::min<std::int64_t>({threads, max_parts, Pool::kMaxParts}));
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
