#include "core/device_restore.h"
#include "dtrain/core/device.h"
#include "dtrain/core/environment.h"
#include "dtrain/core/error.h"
#include "dtrain/core/parallel.h"
#include "support/test_support.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

using namespace dtrain;

TEST_CASE("Device parses and prints", "[core][cpu]") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:3") == Device::cuda(3));
  CHECK(Device::cuda(2).str() == "cuda:2");
  CHECK_THROWS_WITH(Device::parse("gpu"), Catch::Contains("'gpu'"));
  CHECK_THROWS_WITH(Device::parse("cuda:x"), Catch::Contains("cuda:N"));
}

TEST_CASE("cuda::available answers without a GPU", "[core][cpu]") {
  if (!cuda::available()) CHECK_FALSE(cuda::unavailable_reason().empty());
  CHECK(cuda::device_count() >= 0);
}

TEST_CASE("a device guard gives back only a device that had a context", "[core][cpu]") {
  using cuda::restore_previous_device;
  // A thread that had nothing current: cudaGetDevice said 0, which has no context. Putting
  // it back would create one (since CUDA 12): the thread keeps the device it used.
  CHECK_FALSE(restore_previous_device(0, 1, false));
  CHECK(restore_previous_device(0, 1, true));  // device 0 was in use: back to it
  CHECK(restore_previous_device(2, 1, true));
  CHECK_FALSE(restore_previous_device(1, 1, true));  // nothing was changed
}

TEST_CASE("cuda::use_device refuses a device that is not there", "[core][cpu]") {
  const int count = cuda::device_count();
  CHECK_THROWS_WITH(cuda::use_device(count), Catch::Contains("cuda::use_device(" + std::to_string(count) + ")"));
  CHECK_THROWS_WITH(cuda::use_device(-1), Catch::Contains("cuda::use_device(-1)"));
  CHECK(cuda::home_device() == 0);  // nothing chosen yet
}

TEST_CASE("Error carries the message and the source location", "[core][cpu]") {
  try {
    DTRAIN_CHECK(1 + 1 == 3, "arithmetic: expected {}, got {}", 3, 2);
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.message() == "arithmetic: expected 3, got 2");
    CHECK(std::string(e.what()).find("test_core.cpp") != std::string::npos);
  }
}

TEST_CASE("parallel_for covers the range exactly once at any thread count", "[core][cpu]") {
  for (int threads : {1, 2, 3, 8}) {
    set_num_threads(threads);
    std::vector<std::atomic<int>> hits(10007);
    parallel_for(0, 10007, 100, [&](std::int64_t b, std::int64_t e) {
      for (auto i = b; i < e; ++i) hits[i]++;
    });
    for (auto& h : hits) REQUIRE(h == 1);
  }
  set_num_threads(2);
}

TEST_CASE("parallel_for runs back-to-back jobs exactly once each, whoever claims the parts", "[core][cpu]") {
  // Thousands of tiny jobs in a row: workers that are still spinning on the last job, or
  // late to wake, must neither run a part twice nor miss a part of the next one. With
  // more threads than cores some workers are always late, and the caller takes their
  // parts.
  for (int threads : {2, 5}) {
    set_num_threads(threads);
    std::vector<std::atomic<int>> hits(64);
    for (int job = 1; job <= 3000; ++job) {
      parallel_for(0, 64, 1, [&](std::int64_t b, std::int64_t e) {
        for (auto i = b; i < e; ++i) hits[i]++;
      });
      if (job % 500 == 0) {
        for (auto& h : hits) REQUIRE(h == job);
      }
    }
  }
  set_num_threads(2);
}

TEST_CASE("parallel_for respects the grain and runs nested calls inline", "[core][cpu]") {
  set_num_threads(4);
  std::mutex mu;
  std::vector<std::int64_t> sizes;
  parallel_for(0, 1000, 400, [&](std::int64_t b, std::int64_t e) {
    std::lock_guard lock(mu);
    sizes.push_back(e - b);
    int inner_calls = 0;
    parallel_for(0, 100, 1, [&](std::int64_t, std::int64_t) { ++inner_calls; });
    CHECK(inner_calls == 1);  // nested: one inline call
  });
  CHECK(sizes.size() == 2);  // 1000 / 400 -> at most 2 parts
  set_num_threads(2);
}

TEST_CASE("parallel_for propagates exceptions from workers", "[core][cpu]") {
  set_num_threads(2);
  CHECK_THROWS_WITH(parallel_for(0, 100, 1,
                                 [](std::int64_t b, std::int64_t) {
                                   if (b > 0) DTRAIN_FAIL("worker failed at {}", b);
                                 }),
                    Catch::Contains("worker failed"));
  CHECK_THROWS_WITH(set_num_threads(0), Catch::Contains("at least 1"));
}

TEST_CASE("the pool polls long only while its threads fit the hardware threads, DTRAIN_SPIN_US overrides", "[core][cpu]") {
  test::ScopedEnv spin("DTRAIN_SPIN_US", nullptr);
  const int hardware = env::hardware_threads(), ranks = env::local_world_size();
  const auto expected = [&](int threads) { return threads * ranks <= hardware ? 500 : 50; };
  for (int threads : {1, 2, hardware, hardware + 1}) {
    set_num_threads(threads);
    CHECK(pool_spin_us() == expected(threads));
  }
  set_num_threads(hardware + 1);
  CHECK(pool_spin_us() == 50);
  spin.set("0");
  set_num_threads(hardware + 1);
  CHECK(pool_spin_us() == 0);
  spin.set("2000");
  set_num_threads(1);
  CHECK(pool_spin_us() == 2000);
  for (const char* bad : {"-5", "1000001"}) {
    spin.set(bad);
    CHECK_THROWS_WITH(set_num_threads(2), Catch::Contains(std::string("DTRAIN_SPIN_US=") + bad));
    CHECK(pool_spin_us() == 2000);  // a refused setting changes nothing
  }
  // Back-to-back jobs still run exactly once each when the waiting threads never poll.
  spin.set("0");
  set_num_threads(2);
  std::vector<std::atomic<int>> hits(64);
  for (int job = 0; job < 200; ++job) {
    parallel_for(0, 64, 1, [&](std::int64_t b, std::int64_t e) {
      for (auto i = b; i < e; ++i) hits[i]++;
    });
  }
  for (auto& h : hits) REQUIRE(h == 200);
  spin.set(nullptr);
  set_num_threads(2);
}

TEST_CASE("environment integers are validated", "[core][cpu]") {
  ::setenv("DTRAIN_TEST_INT", "12", 1);
  CHECK(env::get_int("DTRAIN_TEST_INT") == 12);
  ::setenv("DTRAIN_TEST_INT", "12x", 1);
  CHECK_THROWS_WITH(env::get_int("DTRAIN_TEST_INT"), Catch::Contains("DTRAIN_TEST_INT='12x'"));
  ::unsetenv("DTRAIN_TEST_INT");
  CHECK_FALSE(env::get_int("DTRAIN_TEST_INT").has_value());
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  CHECK(env::local_world_size() == 2);
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}

TEST_CASE("ranks on this host under srun come from Slurm's step layout", "[core][cpu]") {
  // Open MPI ranks that srun starts (through PMIx) have no OMPI_COMM_WORLD_LOCAL_SIZE, and
  // srun sets SLURM_NTASKS_PER_NODE only for --ntasks-per-node.
  test::ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_SIZE", nullptr), mpich("MPI_LOCALNRANKS", nullptr);
  test::ScopedEnv per_node("SLURM_NTASKS_PER_NODE", nullptr), node("SLURM_NODEID", "0");
  test::ScopedEnv step("SLURM_STEP_TASKS_PER_NODE", "2");
  CHECK(env::local_world_size() == 2);
  step.set("4(x2),3,1(x2)");  // nodes 0-1 run 4 tasks, node 2 runs 3, nodes 3-4 run 1
  for (auto [id, tasks] : {std::pair{"0", 4}, {"1", 4}, {"2", 3}, {"3", 1}, {"4", 1}}) {
    node.set(id);
    CHECK(env::local_world_size() == tasks);
  }
  node.set("5");  // past the list, or a list that does not parse: the other variables, else 1
  CHECK(env::local_world_size() == 1);
  per_node.set("3");
  CHECK(env::local_world_size() == 3);
  per_node.set(nullptr);
  node.set("0");
  for (const char* bad : {"x", "2(x", "2(x0)", ",2"}) {
    step.set(bad);
    CHECK(env::local_world_size() == 1);
  }
  step.set("4(x2)");
  ompi.set("2");  // Open MPI's own variable (mpirun inside an allocation) comes first
  CHECK(env::local_world_size() == 2);
}
