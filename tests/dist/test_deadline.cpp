// run_with_deadline, the bound on NCCL's communicator set-up (ncclCommInitRank and
// ncclCommSplit wait for every rank): a call that returns, one that throws, and one that
// never comes back while the deadline passes.
#include "comm/deadline.h"
#include "support/test_support.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>

using namespace dtrain;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using Catch::Matchers::Matches;

TEST_CASE("run_with_deadline returns the call's outcome when it ends in time", "[cpu][dist]") {
  int ran = 0;
  dist::run_with_deadline("init", "all ranks", 10s, dist::OnTimeout::Throw, [&ran] { ran = 1; });
  CHECK(ran == 1);
  CHECK_THROWS_WITH(dist::run_with_deadline("init", "all ranks", 10s, dist::OnTimeout::Throw,
                                            [] { throw std::runtime_error("ncclCommInitRank failed: boom"); }),
                    Contains("ncclCommInitRank failed: boom"));
}

TEST_CASE("run_with_deadline reports a call that outlives the timeout, naming it and what it waits for",
          "[cpu][dist]") {
  // A call blocked like ncclCommInitRank with a rank missing, until the test lets it go.
  struct Gate {
    std::mutex mutex;
    std::condition_variable cv;
    bool open = false, left = false;
  };
  auto gate = std::make_shared<Gate>();
  CHECK_THROWS_WITH(
      dist::run_with_deadline("rank 0: ncclCommInitRank (2 ranks)", "all ranks", 100ms, dist::OnTimeout::Throw,
                              [gate] {
                                std::unique_lock lock(gate->mutex);
                                gate->cv.wait(lock, [&] { return gate->open; });
                                gate->left = true;
                                gate->cv.notify_all();
                              }),
      Matches(R"(rank 0: ncclCommInitRank \(2 ranks\) waited [0-9.]+ s for all ranks; the )"
              R"(communicator was not made.*)"));
  // The call still runs (nothing can cancel it) and owns what it touches: let it end.
  std::unique_lock lock(gate->mutex);
  gate->open = true;
  gate->cv.notify_all();
  CHECK(gate->cv.wait_for(lock, 10s, [&] { return gate->left; }));
}
