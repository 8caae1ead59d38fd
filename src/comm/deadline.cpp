#include "comm/deadline.h"

#include "dtrain/core/error.h"

#include <fmt/format.h>

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace dtrain::dist {
namespace {
// Shared by the waiter and the body's thread, which may outlive the waiter.
struct Outcome {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr error;
};
}  // namespace

void run_with_deadline(const std::string& what, const std::string& waiting_for, std::chrono::milliseconds timeout,
                       OnTimeout policy, std::function<void()> body) {
  auto outcome = std::make_shared<Outcome>();
  const auto start = std::chrono::steady_clock::now();
  std::thread([outcome, body = std::move(body)] {
    std::exception_ptr error;
    try {
      body();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(outcome->mutex);
    outcome->error = error;
    outcome->done = true;
    outcome->done_cv.notify_all();
  }).detach();

  std::unique_lock lock(outcome->mutex);
  if (outcome->done_cv.wait_for(lock, timeout, [&] { return outcome->done; })) {
    if (outcome->error) std::rethrow_exception(outcome->error);
    return;
  }
  lock.unlock();
  const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
  const std::string report = fmt::format("{} waited {:.1f} s for {}", what, waited.count(), waiting_for);
  if (policy == OnTimeout::AbortJob) abort_job(report + "; aborting the job");  // returns only without MPI
  DTRAIN_FAIL("{}; the communicator was not made", report);
}

}  // namespace dtrain::dist
