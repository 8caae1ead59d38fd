// CommThread on its own: FIFO order whoever runs the tasks, errors named by their
// operation, and the watchdog's report for an operation that outlives the timeout (ending
// the job, or under OnTimeout::Throw failing the operation and the thread).
#include "comm/comm_thread.h"
#include "support/test_support.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

using namespace dtrain;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using Catch::Matchers::Matches;
using dist::CommThread;

namespace {

constexpr auto kTimeout = 100ms;  // the watchdog's, in the tests of its report
// Upper bound on how long a report takes, in timeouts. Measured (release build, 2 cores,
// load average 2-3, four runs side by side): 1.002-1.007 timeouts until the report, 1.01-1.05
// until a Throw waiter has its error. kSlack timeouts (2 s) still tell a report at the
// deadline from one that waits for something else (a later deadline, the stalled task), and
// leave 1.9 s for a loaded 2-core machine or a sanitizer build to wake the watchdog and the
// waiter, where they took a few milliseconds.
constexpr double kSlack = 20;
// A wait that is expected to time out: how long a bug has to show (what it would do takes
// microseconds).
constexpr auto kBugWindow = 200ms;

double timeouts_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start) / kTimeout;
}

}  // namespace

TEST_CASE("CommThread runs tasks in submission order, on its thread or the waiter's", "[cpu][dist]") {
  CommThread thread(10s);
  std::vector<int> order;  // written only by the running task: tasks never overlap
  std::vector<dist::WorkPtr> works;
  for (int i = 0; i < 200; ++i)
    works.push_back(thread.submit({"op", 0, "nobody"}, [&order, i] { order.push_back(i); }));
  works.back()->wait();  // may run the queue's rest on this thread
  for (auto& w : works) w->wait();
  std::vector<int> expected(200);
  for (int i = 0; i < 200; ++i) expected[static_cast<std::size_t>(i)] = i;
  CHECK(order == expected);
}

TEST_CASE("CommThread rethrows a task's error prefixed by its operation", "[cpu][dist]") {
  CommThread thread(10s);
  dist::WorkPtr failing =
      thread.submit({"all_gather", 8, "all ranks"}, [] { DTRAIN_FAIL("MPI_Allgather failed: boom"); });
  int after = 0;
  dist::WorkPtr next = thread.submit({"barrier", 0, "all ranks"}, [&after] { after = 1; });
  CHECK_THROWS_WITH(failing->wait(), Contains("all_gather: MPI_Allgather failed: boom"));
  next->wait();
  CHECK(after == 1);
}

TEST_CASE("the watchdog reports an operation that outlives the timeout", "[cpu][dist]") {
  std::atomic<bool> fired{false};
  std::string report;
  CommThread thread(kTimeout, [&](const std::string& message) {
    report = message;
    fired = true;
  });
  thread.submit({"quick", 4, "rank 1"}, [] {})->wait();
  auto start = std::chrono::steady_clock::now();
  // Stalls like a collective whose peer is gone, until the watchdog has spoken.
  thread
      .submit({"all_reduce", 4096, "rank 3"},
              [&] {
                while (!fired) std::this_thread::sleep_for(1ms);
              })
      ->wait();
  const double took = timeouts_since(start);
  CHECK_THAT(report, Matches(R"(all_reduce \(#2, 4096 bytes\) waited [0-9.]+ s for rank 3; aborting the job)"));
  CHECK(took >= 1.0);
  CHECK(took < kSlack);
}

TEST_CASE("under OnTimeout::Throw a stalled operation fails its waiters and the thread takes no more", "[cpu][dist]") {
  std::atomic<bool> release{false}, reported{false};
  std::string report;
  CommThread thread(
      kTimeout,
      [&](const std::string& message) {
        report = message;
        reported = true;
      },
      dist::OnTimeout::Throw);
  // Stalls like a collective whose peer is gone, until the test lets it go.
  dist::WorkPtr stalled = thread.submit({"all_reduce", 4096, "rank 3"}, [&] {
    while (!release) std::this_thread::sleep_for(1ms);
  });
  bool ran = false;
  dist::WorkPtr queued = thread.submit({"broadcast", 8, "all ranks"}, [&] { ran = true; });
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(stalled->wait(), Matches(R"(all_reduce \(#1, 4096 bytes\) waited [0-9.]+ s for rank 3; the )"
                                             R"(communicator is now unusable.*)"));
  const double took = timeouts_since(start);
  CHECK(took < kSlack);
  CHECK_THROWS_WITH(queued->wait(), Contains("broadcast: the communicator is unusable: all_reduce (#1, 4096 bytes)"));
  CHECK_THROWS_WITH(thread.run({"barrier", 0, "all ranks"}, [] {}),
                    Contains("barrier: the communicator is unusable: all_reduce (#1, 4096 bytes)"));
  CHECK(thread.failed());
  CHECK_FALSE(thread.wait_idle(10ms));  // the stalled body still runs
  release = true;
  CHECK(thread.wait_idle(5s));
  CHECK_THROWS_WITH(stalled->wait(), Contains("the communicator is now unusable"));  // also once it ended
  while (!reported) std::this_thread::sleep_for(1ms);
  CHECK_THAT(report, Matches(R"(all_reduce \(#1, 4096 bytes\) waited [0-9.]+ s for rank 3)"));
  CHECK_FALSE(ran);
}

TEST_CASE("under OnTimeout::Throw nothing starts while the timeout is reported, even if the stalled task ends",
          "[cpu][dist]") {
  // The stalled task ends while on_timeout runs: the task queued behind it must not start
  // then (it would run with no watchdog), but fail with the rest of the queue.
  std::atomic<bool> release{false};
  std::mutex mutex;
  std::condition_variable ran_cv;
  bool ran = false;  // guarded by mutex
  bool stalled_ended = false, ran_during_report = false;
  CommThread* self = nullptr;  // the handler runs on the watchdog thread, after construction
  CommThread thread(
      kTimeout,
      [&](const std::string&) {
        release = true;
        // Conditions, not sleeps: the stalled task ends (its runner then wakes the worker,
        // whose queue holds the next task), and then a worker that wrongly starts that task
        // has a window to do so. The wait for `ran` is expected to time out; its deadline
        // only bounds how long a bug has to show (starting a queued task takes microseconds).
        stalled_ended = self->wait_idle(10s);
        std::unique_lock lock(mutex);
        ran_during_report = ran_cv.wait_for(lock, kBugWindow, [&] { return ran; });
      },
      dist::OnTimeout::Throw);
  self = &thread;
  dist::WorkPtr stalled = thread.submit({"all_reduce", 4096, "rank 3"}, [&] {
    while (!release) std::this_thread::sleep_for(1ms);
  });
  dist::WorkPtr queued = thread.submit({"broadcast", 8, "all ranks"}, [&] {
    {
      std::lock_guard lock(mutex);
      ran = true;
    }
    ran_cv.notify_all();
  });
  CHECK_NOTHROW(stalled->wait());  // it ended before the watchdog failed it
  CHECK_THROWS_WITH(queued->wait(), Contains("broadcast: the communicator is unusable: all_reduce (#1, 4096 bytes)"));
  CHECK(stalled_ended);
  CHECK_FALSE(ran_during_report);
  std::lock_guard lock(mutex);
  CHECK_FALSE(ran);
  CHECK(thread.failed());
}

TEST_CASE("fail() refuses new operations and fails the queued ones, letting the running one finish", "[cpu][dist]") {
  CommThread thread(10s, {}, dist::OnTimeout::Throw);
  std::atomic<bool> started{false}, release{false};
  dist::WorkPtr running = thread.submit({"all_reduce", 4, "all ranks"}, [&] {
    started = true;
    while (!release) std::this_thread::sleep_for(1ms);
  });
  while (!started) std::this_thread::sleep_for(1ms);
  dist::WorkPtr queued = thread.submit({"barrier", 0, "all ranks"}, [] {});
  thread.fail("irecv (4 bytes, tag 1) waited 10.0 s for rank 2");
  CHECK_THROWS_WITH(queued->wait(), Contains("barrier: the communicator is unusable: irecv (4 bytes, tag 1)"));
  CHECK_THROWS_WITH(thread.submit({"split", 0, "all ranks"}, [] {}),
                    Contains("split: the communicator is unusable: irecv"));
  release = true;
  CHECK_NOTHROW(running->wait());
}

TEST_CASE("a CommThread rejects a timeout that is not positive", "[cpu][dist]") {
  CHECK_THROWS_WITH(CommThread(0ms), Contains("the timeout must be positive"));
}
