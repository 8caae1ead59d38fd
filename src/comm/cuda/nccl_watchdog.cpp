#include "comm/cuda/nccl_watchdog.h"

#include "dtrain/comm/communicator.h"

#include <fmt/format.h>

namespace dtrain::dist::nccl {
namespace {
constexpr auto kPollInterval = std::chrono::milliseconds(50);
constexpr auto kAbortGrace = std::chrono::seconds(5);
}  // namespace

void throw_error(ncclResult_t status, const char* call, ncclComm_t comm, std::source_location where) {
  // NCCL keeps the last detailed message per process; the communicator argument is unused
  // and may be null (a failed ncclCommInitRank has none).
  const char* last = ncclGetLastError(comm);
  throw Error(
      fmt::format("nccl: {} failed: {} (ncclResult_t {}){}{}", call, ncclGetErrorString(status),
                  static_cast<int>(status), last != nullptr && *last != '\0' ? ": " : "", last != nullptr ? last : ""),
      where);
}

Event::Event() { DTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
Event::~Event() { cudaEventDestroy(event_); }

Watchdog::Watchdog(ncclComm_t comm, int device, std::chrono::milliseconds timeout, OnTimeout policy)
    : comm_(comm), device_(device), timeout_(timeout), policy_(policy) {
  DTRAIN_CHECK(timeout.count() > 0, "nccl: the timeout must be positive, got {} ms", timeout.count());
  try {
    DTRAIN_NCCL_CHECK(ncclCommUserRank(comm_, &rank_), comm_);
    DTRAIN_NCCL_CHECK(ncclCommCount(comm_, &size_), comm_);
  } catch (...) {
    ncclCommAbort(comm_);
    throw;
  }
  thread_ = std::thread([this] { run(); });
}

// The owner has waited for its stream, so a healthy communicator has nothing in flight
// and ncclCommDestroy returns at once; after an asynchronous error it might never, so the
// communicator is aborted instead.
Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (aborted_.load(std::memory_order_acquire)) return;  // fail() has freed it
  ncclResult_t async = ncclSuccess;
  const bool healthy = ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async == ncclSuccess;
  if (healthy) ncclCommDestroy(comm_);
  else ncclCommAbort(comm_);
}

void Watchdog::track(std::string what, std::shared_ptr<Event> done) {
  std::lock_guard lock(mutex_);
  in_flight_.push_back({std::move(what), std::move(done), std::chrono::steady_clock::now()});
}

void Watchdog::throw_if_aborted() const {
  if (aborted_.load(std::memory_order_acquire)) throw Error(fmt::format("nccl: {}", failure_));
}

void Watchdog::rethrow_async_error() const {
  std::lock_guard lock(comm_mutex_);
  rethrow_async_error_locked();
}

void Watchdog::rethrow_async_error_locked() const {
  throw_if_aborted();
  ncclResult_t async = ncclSuccess;
  DTRAIN_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async), comm_);
  if (async != ncclSuccess && async != ncclInProgress) throw_error(async, "an earlier NCCL operation", comm_);
}

void Watchdog::run() {
  // Events belong to the device's context; make it this thread's.
  if (cudaSetDevice(device_) != cudaSuccess) cudaGetLastError();
  std::string failure;
  std::unique_lock lock(mutex_);
  while (!stopping_ && failure.empty()) {
    wake_.wait_for(lock, kPollInterval);
    if (stopping_) break;
    while (!in_flight_.empty()) {
      const InFlight& oldest = in_flight_.front();
      const cudaError_t status = cudaEventQuery(oldest.done->get());
      if (status == cudaSuccess) {
        in_flight_.pop_front();
        continue;
      }
      const auto waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - oldest.since);
      if (status != cudaErrorNotReady) {
        failure = fmt::format("{} failed on cuda:{}: {}", oldest.what, device_, cudaGetErrorString(status));
      } else if (waited > timeout_) {
        failure = fmt::format(
            "{} on cuda:{} not done after {:.1f} s: a rank died, stalled or called another "
            "collective",
            oldest.what, device_, waited.count());
      }
      break;  // the rest were queued after it on the same stream
    }
    ncclResult_t async = ncclSuccess;
    if (failure.empty() && ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress) {
      const char* last = ncclGetLastError(comm_);
      failure = fmt::format("an asynchronous NCCL error on cuda:{}: {}{}{}", device_, ncclGetErrorString(async),
                            last != nullptr && *last != '\0' ? ": " : "", last != nullptr ? last : "");
    }
  }
  lock.unlock();
  if (!failure.empty()) fail(failure);
}

// Aborting the communicator unblocks NCCL kernels and calls stuck on the dead peer; then
// (AbortJob) the whole job ends (MPI_Abort), as for the MPI backend's timeout. Under
// Throw, or without MPI, the process goes on, and the failure is what every later use of
// this communicator throws.
//
// The abort waits for a call in progress on another thread (with_comm), which must not
// find comm_ freed under it; but a call blocked inside NCCL (connecting to a dead peer)
// never returns, and ending such a call is what ncclCommAbort from another thread is for.
// So after kAbortGrace it aborts anyway: that call then returns an error, and the caller
// touches comm_ no more.
void Watchdog::fail(const std::string& message) {
  std::unique_lock lock(comm_mutex_, kAbortGrace);
  const bool abort = policy_ == OnTimeout::AbortJob;
  failure_ = fmt::format("rank {} of {}: {}; {}", rank_, size_, message,
                         abort ? "aborting the job" : "the communicator is now unusable");
  aborted_.store(true, std::memory_order_release);
  ncclCommAbort(comm_);
  if (lock.owns_lock()) lock.unlock();
  if (abort) abort_job("nccl " + failure_);
}

}  // namespace dtrain::dist::nccl
