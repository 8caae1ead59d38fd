// What keeps an NCCL group from hanging silently: the owner of the ncclComm_t, a thread
// that watches the operations in flight, and the status checks that turn NCCL's results
// into dtrain::Error. Private to the NCCL backend (nccl_communicator.cpp).
#pragma once

#include "dtrain/core/cuda/device_guard.h"
#include "dtrain/core/error.h"
#include "dtrain/comm/communicator.h"

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <thread>

namespace dtrain::dist::nccl {

// Throws the dtrain::Error for a failed `call`: NCCL's name for the status and its last
// detailed message.
[[noreturn]] void throw_error(ncclResult_t status, const char* call, ncclComm_t comm,
                              std::source_location where = std::source_location::current());

// A CUDA event without timing (the cheap kind), destroyed with its last owner. Destroying
// an event whose work is still queued is allowed: CUDA releases it when the work is done.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class Watchdog {
 public:
  // Takes ownership of `comm` (destroyed with the watchdog) and starts the thread, which
  // checks every 50 ms that the oldest operation in flight is younger than `timeout` and
  // that NCCL reports no asynchronous error (a peer that died, a network failure). Either
  // failure aborts NCCL (ncclCommAbort, which also ends its kernels) and then, under
  // OnTimeout::AbortJob, ends the job with a message naming the operation (abort_job);
  // under OnTimeout::Throw (or without MPI, where abort_job returns) every later use of
  // the communicator throws it.
  Watchdog(ncclComm_t comm, int device, std::chrono::milliseconds timeout, OnTimeout policy);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // One queued operation, in queue order; `done` is recorded after it on the stream.
  void track(std::string what, std::shared_ptr<Event> done);
  // Throws when NCCL has reported an asynchronous error for this communicator, or when the
  // watchdog has aborted it.
  void rethrow_async_error() const;
  // Returns call(comm), an NCCL call on the communicator, which fail() does not abort (and
  // free) meanwhile; first throws as rethrow_async_error() does, under the same lock. (A
  // mutex per NCCL call: NCCL calls cost microseconds.)
  template <class Call>
  ncclResult_t with_comm(Call&& call) {
    std::lock_guard lock(comm_mutex_);
    rethrow_async_error_locked();
    return call(comm_);
  }

 private:
  struct InFlight {
    std::string what;
    std::shared_ptr<Event> done;
    std::chrono::steady_clock::time_point since;
  };
  void run();
  void fail(const std::string& message);
  void throw_if_aborted() const;
  void rethrow_async_error_locked() const;  // comm_mutex_ held

  ncclComm_t comm_;
  int device_;
  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_;
  OnTimeout policy_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<InFlight> in_flight_;  // completes in order: one stream
  bool stopping_ = false;
  // Held by every use of comm_ outside run() and by fail() around its abort, so that a
  // call never finds comm_ freed (see fail() for a call that NCCL never returns from).
  mutable std::timed_mutex comm_mutex_;
  std::string failure_;               // written once, before aborted_ is set
  std::atomic<bool> aborted_{false};  // comm_ is aborted (and freed) by fail()
  std::thread thread_;
};

}  // namespace dtrain::dist::nccl

#define DTRAIN_NCCL_CHECK(call, comm)                                        \
  do {                                                                       \
    const ncclResult_t dtrain_nccl_status_ = (call);                         \
    if (dtrain_nccl_status_ != ncclSuccess) [[unlikely]] {                   \
      ::dtrain::dist::nccl::throw_error(dtrain_nccl_status_, #call, (comm)); \
    }                                                                        \
  } while (0)
