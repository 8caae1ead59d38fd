// Intra-op parallelism: one process-wide pool of worker threads that poll briefly for the
// next job, then sleep on a condition variable (pool_spin_us()). parallel_for splits
// [begin, end) into at most num_threads() contiguous ranges; a call from inside a
// parallel region, or while another thread owns the pool, runs inline on the calling
// thread.
#pragma once

#include <cstdint>
#include <type_traits>

namespace dtrain {

// Threads used by ops. Default: DTRAIN_NUM_THREADS if set, else hardware threads divided
// by the number of ranks on this host (Open MPI / Slurm local size), at least 1.
int num_threads();
// Sets the thread count (n >= 1) and its poll (pool_spin_us()); throws dtrain::Error
// otherwise, or when DTRAIN_SPIN_US is bad.
void set_num_threads(int n);
// Microseconds a waiting pool thread polls before it blocks, for the current thread
// count: DTRAIN_SPIN_US if set, else 500 when threads x ranks on this host fit its
// hardware threads, 50 when they outnumber them (a long poll would then hold a core that
// a runnable thread needs). DTRAIN_SPIN_US is read again by each set_num_threads.
std::int64_t pool_spin_us();
bool in_parallel_region();

namespace detail {
using RangeFn = void (*)(void* ctx, std::int64_t begin, std::int64_t end);
void parallel_run(std::int64_t begin, std::int64_t end, std::int64_t grain, RangeFn fn, void* ctx);
}  // namespace detail

// f(b, e) is called on disjoint sub-ranges covering [begin, end); each range holds at least
// `grain` items unless the whole range is smaller. Exceptions from f propagate to the caller.
template <class F>
void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain, F&& f) {
  if (end <= begin) return;
  if (grain < 1) grain = 1;
  if (end - begin <= grain || in_parallel_region() || num_threads() == 1) {
    f(begin, end);
    return;
  }
  using Fn = std::remove_reference_t<F>;
  detail::parallel_run(
      begin, end, grain,
      [](void* ctx, std::int64_t b, std::int64_t e) { (*static_cast<Fn*>(ctx))(b, e); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

}  // namespace dtrain
