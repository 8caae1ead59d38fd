// CommThread on its own: FIFO order whoever runs the tasks, errors named by their
// operation, and the watchdog's report for an operation that outlives the timeout.
#include "dist/comm_thread.h"
#include "support/test_support.h"

#include <atomic>
#include <thread>
#include <vector>

using namespace dtrain;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using Catch::Matchers::Matches;
using dist::CommThread;

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
  CommThread thread(100ms, [&](const std::string& message) {
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
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  CHECK_THAT(report, Matches(R"(all_reduce \(#2, 4096 bytes\) waited 0\.[0-9] s for rank 3; aborting the job)"));
  CHECK(took.count() >= 0.1);
  CHECK(took.count() < 2.0);
}

TEST_CASE("a CommThread rejects a timeout that is not positive", "[cpu][dist]") {
  CHECK_THROWS_WITH(CommThread(0ms), Contains("the timeout must be positive"));
}
