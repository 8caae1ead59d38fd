// Backoff: how a communication thread waits for another process without burning a core.
// Ranks share the cores with each other and with compute threads (2 vCPUs run 2-4 ranks
// here), so a waiter must not spin for long: it polls for a short while (30 us: a peer
// that is in step answers within that), yielding the core between polls, then sleeps in
// growing steps from 20 to 200 us.
// A waiter whose polls move the data (MPI progresses a large transfer only inside the
// calls of both sides) polls for about as long as the transfer takes: spin_for(bytes).
// A poller that nobody waits on (the messages' progress thread) may sleep longer.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <thread>

namespace dtrain::dist {

class Backoff {
 public:
  static constexpr std::chrono::microseconds kSpin{30};
  static constexpr std::chrono::microseconds kMaxSleep{200};

  explicit Backoff(std::chrono::microseconds spin = kSpin, std::chrono::microseconds max_sleep = kMaxSleep)
      : spin_(spin), max_sleep_(max_sleep) {}

  // Call after each poll that found nothing to do.
  void pause() {
    auto now = std::chrono::steady_clock::now();
    if (polls_++ == 0) spin_until_ = now + spin_;
    if (now < spin_until_) {
      // The first polls only pause the pipeline; then each poll yields, so that a peer rank
      // (or a compute thread) waiting for this core runs: with more ranks than cores, the
      // peer this rank waits for may be exactly the one that needs the core.
      if (polls_ < kPausePolls) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      } else {
        std::this_thread::yield();
      }
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, max_sleep_);
  }

 private:
  static constexpr long kPausePolls = 50;
  std::chrono::microseconds spin_;
  std::chrono::microseconds max_sleep_;
  std::chrono::steady_clock::time_point spin_until_;
  std::chrono::microseconds sleep_{20};
  long polls_ = 0;
};

// The polling time for a transfer of `bytes`: the default plus the time it takes at 4 GB/s,
// a conservative rate for one host.
inline std::chrono::microseconds spin_for(std::size_t bytes) {
  return Backoff::kSpin + std::chrono::microseconds(bytes / 4096);
}

// The polling time for a message between processes that may sit on different hosts (the
// point-to-point collective algorithms): a network round trip under load (200 us) plus the
// transfer at 0.5 GB/s, half of 10 Gbit/s Ethernet. MPI's TCP transport moves a message
// larger than its eager limit only after a handshake that each side answers inside an MPI
// call, so a waiter that sleeps while the message is under way delays every handshake by
// its sleep: 200 us per step made the ring 10x slower than MPI_Allreduce at 64 KB between
// emulated hosts. With 100 us plus 1 GB/s, a shaped link's bursts still outlasted the
// polling now and then: Rabenseifner's two 512 KB swaps took 1.05-1.4x MPI_Allreduce's time
// at 1 MB between 2 emulated hosts (10 Gbit/s), and 1.00-1.02x with this.
inline std::chrono::microseconds spin_for_network(std::size_t bytes) {
  return std::chrono::microseconds(200) + std::chrono::microseconds(bytes / 500);
}

// Polls `done()` with a Backoff until it returns true.
template <class Poll>
void wait_with_backoff(Poll&& done, std::chrono::microseconds spin = Backoff::kSpin) {
  Backoff backoff(spin);
  while (!done()) backoff.pause();
}

}  // namespace dtrain::dist
