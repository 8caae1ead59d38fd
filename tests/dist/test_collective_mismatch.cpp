// Collective-mismatch detection (CommunicatorOptions::check_collectives,
// DTRAIN_CHECK_COLLECTIVES): the records and their messages at any world size, and under
// mpirun ranks that call different collectives on purpose, on the MPI communicator (which
// checks on its communication thread) and through CheckedCommunicator (what NCCL's
// communicator is wrapped in), here over MPI. Every rank throws the same error before any
// enters the real collective, so a test collects the errors and checks them after its
// last collective, and a caught mismatch cannot leave a rank waiting.
#include "comm/checked_communicator.h"
#include "comm/collective_record.h"
#include "comm/communicator_options.h"
#include "dtrain/comm/communicator.h"
#include "support/test_support.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

using namespace dtrain;
using namespace std::chrono_literals;
using dist::CollectiveOp;
using dist::CollectiveRecord;
using dist::CommunicatorPtr;
using Op = dist::ReduceOp;
using Catch::Matchers::Contains;

namespace {

// A fresh checked world per test: its calls are numbered from #1. (With one process it is
// the local communicator, which has nobody to compare with and checks nothing.)
CommunicatorPtr checked_world() { return dist::world({.timeout = 60s, .check_collectives = true}); }

// The wrapper NCCL's communicator gets, around an unchecked MPI world, its records going
// over another one.
CommunicatorPtr wrapped_world() {
  return std::make_shared<dist::CheckedCommunicator>(dist::world({.timeout = 60s}), dist::world({.timeout = 60s}),
                                                     "wrapped");
}

using test::error_of;

// "rank 1" or "ranks 1, 2, 3": every rank but `except`, as the messages name them.
std::string others(int size, int except) {
  std::vector<std::string> ranks;
  for (int r = 0; r < size; ++r) {
    if (r != except) ranks.push_back(std::to_string(r));
  }
  std::string joined;
  for (const std::string& r : ranks) joined += (joined.empty() ? "" : ", ") + r;
  return (ranks.size() == 1 ? "rank " : "ranks ") + joined;
}

CollectiveRecord all_reduce_record(const Tensor& t, Op op = Op::Sum, std::int64_t sequence = 1) {
  CollectiveRecord r = CollectiveRecord::call(CollectiveOp::AllReduce, &t, -1, static_cast<int>(op));
  r.sequence = sequence;
  return r;
}

// A matching all-reduce after a caught mismatch: the communicator still works.
std::vector<float> sum_of_ones(const CommunicatorPtr& c) {
  Tensor t = Tensor::ones({2});
  c->all_reduce(t);
  return t.to_vector<float>();
}

// Every collective of both kinds of checked communicator, with the results checked.
void run_matching_collectives(const CommunicatorPtr& c) {
  const int n = c->size();
  const auto size = static_cast<float>(n);
  Tensor sum = Tensor::full({3}, c->rank() + 1);
  c->all_reduce(sum);
  Tensor a = Tensor::ones({2}), b = Tensor::full({4}, c->rank(), {DType::i64});
  dist::WorkPtr wa = c->all_reduce_async(a, Op::Mean);
  dist::WorkPtr wb = c->all_reduce_async(b, Op::Max);
  wa->wait();
  wb->wait();
  Tensor root = Tensor::full({2}, c->rank());
  c->broadcast(root, n - 1);
  Tensor gathered = Tensor::empty({n, 1});
  c->all_gather(Tensor::full({1}, c->rank()), gathered);
  Tensor scattered = Tensor::empty({2});
  c->reduce_scatter(Tensor::ones({n, 2}), scattered);
  c->barrier();
  CommunicatorPtr child = c->split(0, c->rank());
  std::vector<float> child_sum = sum_of_ones(child);

  CHECK(sum.to_vector<float>() == std::vector<float>(3, size * (size + 1) / 2));
  CHECK(a.to_vector<float>() == std::vector<float>{1, 1});
  CHECK(b.to_vector<std::int64_t>() == std::vector<std::int64_t>(4, n - 1));
  CHECK(root.to_vector<float>() == std::vector<float>(2, size - 1));
  for (int r = 0; r < n; ++r) CHECK(gathered.to_vector<float>()[static_cast<std::size_t>(r)] == r);
  CHECK(scattered.to_vector<float>() == std::vector<float>(2, size));
  CHECK(child_sum == std::vector<float>(2, size));
}

// Deliberate mismatches, each followed by matching calls. `name` is the communicator's.
void run_mismatches(const CommunicatorPtr& c, const std::string& name) {
  const int n = c->size();
  const int rank = c->rank();
  const auto size = static_cast<float>(n);

  Tensor shape = Tensor::ones({rank == 0 ? 3 : 4});
  const std::string shape_error = error_of([&] { c->all_reduce(shape); });  // call #1
  const std::vector<float> after_shape = sum_of_ones(c);                    // #2

  Tensor dtype = Tensor::ones({4}, {rank == 1 ? DType::f64 : DType::f32});
  const std::string dtype_error = error_of([&] { c->all_reduce(dtype); });  // #3

  Tensor op = Tensor::ones({4});
  const std::string op_error = error_of([&] {  // #4
    if (rank == 0) {
      c->broadcast(op, 0);
    } else {
      c->all_reduce(op);
    }
  });

  // Async: MPI fails it from wait(), the wrapper at the call; neither runs it.
  Tensor async = Tensor::ones({4});
  const std::string async_error =
      error_of([&] { c->all_reduce_async(async, rank == n - 1 ? Op::Max : Op::Sum)->wait(); });  // #5
  const std::vector<float> at_end = sum_of_ones(c);                                              // #6

  const std::string at = "collective mismatch at call #";
  const std::string on = " on communicator '" + name + "': ";
  CHECK_THAT(shape_error, Contains(at + "1" + on + "rank 0 called all_reduce(f32 [3], sum) but " + others(n, 0) +
                                   " called all_reduce(f32 [4], sum)"));
  CHECK(after_shape == std::vector<float>(2, size));
  const std::string f32_ranks = n == 2 ? "rank 0" : others(n, 1);
  CHECK_THAT(dtype_error, Contains(at + "3" + on + f32_ranks +
                                   " called all_reduce(f32 [4], sum) but rank 1 called all_reduce(f64 [4], sum)"));
  CHECK_THAT(op_error, Contains(at + "4" + on + "rank 0 called broadcast(f32 [4], root 0) but " + others(n, 0) +
                                " called all_reduce(f32 [4], sum)"));
  const std::string sum_ranks = n == 2 ? "rank 0" : others(n, n - 1);
  CHECK_THAT(async_error, Contains(at + "5" + on + sum_ranks + " called all_reduce(f32 [4], sum) but rank " +
                                   std::to_string(n - 1) + " called all_reduce(f32 [4], max)"));
  CHECK(at_end == std::vector<float>(2, size));
  // No rank entered a mismatched collective: the tensors are as they were.
  CHECK(shape.to_vector<float>() == std::vector<float>(static_cast<std::size_t>(shape.numel()), 1));
  CHECK(dtype.to_vector<double>() == std::vector<double>(4, 1));
  CHECK(async.to_vector<float>() == std::vector<float>(4, 1));
}

// A mismatch on a split names the child.
void run_split_mismatch(const CommunicatorPtr& c, const std::string& name) {
  CommunicatorPtr child = c->split(0, c->rank());
  Tensor gathered = Tensor::empty({child->size(), 2});
  const std::string error = error_of([&] {
    if (child->rank() == 0) {
      child->barrier();
    } else {
      child->all_gather(Tensor::ones({2}), gathered);
    }
  });
  CHECK_THAT(error, Contains("collective mismatch at call #1 on communicator '" + name +
                             ".split(0)': rank 0 called barrier() but " + others(child->size(), 0) +
                             " called all_gather(f32 [2])"));
}

}  // namespace

TEST_CASE("a collective record describes the call in words", "[cpu][dist]") {
  CHECK(dist::call_str(all_reduce_record(Tensor::zeros({3}))) == "all_reduce(f32 [3], sum)");
  Tensor ids = Tensor::zeros({2, 5}, {DType::i64});
  CHECK(dist::call_str(CollectiveRecord::call(CollectiveOp::Broadcast, &ids, 1)) == "broadcast(i64 [2, 5], root 1)");
  CHECK(dist::call_str(CollectiveRecord::call(CollectiveOp::ReduceScatter, &ids, -1, static_cast<int>(Op::Max))) ==
        "reduce_scatter(i64 [2, 5], max)");
  CHECK(dist::call_str(CollectiveRecord::call(CollectiveOp::Barrier)) == "barrier()");
  // Past six dimensions the sizes are hashed: a difference there still tells them apart.
  Tensor deep = Tensor::zeros({1, 1, 1, 1, 1, 1, 2, 3});
  Tensor deeper = Tensor::zeros({1, 1, 1, 1, 1, 1, 3, 2});
  CHECK_THAT(dist::call_str(all_reduce_record(deep)),
             Contains("all_reduce(f32 [1, 1, 1, 1, 1, 1, ... (8 dims, the rest hashed to "));
  CHECK_FALSE(all_reduce_record(deep) == all_reduce_record(deeper));
  CHECK(dist::from_words(dist::to_words(all_reduce_record(deep))) == all_reduce_record(deep));
}

TEST_CASE("a mismatch names each group of ranks and what it called", "[cpu][dist]") {
  Tensor three = Tensor::zeros({3}), four = Tensor::zeros({4});
  std::vector<CollectiveRecord> same(3, all_reduce_record(three, Op::Sum, 5));
  CHECK_FALSE(dist::find_mismatch(same, "world").has_value());

  std::vector<CollectiveRecord> records = {all_reduce_record(three, Op::Sum, 5), all_reduce_record(four, Op::Sum, 5),
                                           all_reduce_record(three, Op::Sum, 5),
                                           all_reduce_record(three.to(DType::f64), Op::Sum, 5)};
  CHECK(dist::find_mismatch(records, "w") ==
        "collective mismatch at call #5 on communicator 'w': ranks 0, 2 called all_reduce(f32 [3], sum) but rank 1 "
        "called all_reduce(f32 [4], sum), rank 3 called all_reduce(f64 [3], sum)");

  // The same call after different earlier ones: only the fingerprints tell.
  std::vector<CollectiveRecord> histories = same;
  histories[1].history = 42;
  std::optional<std::string> message = dist::find_mismatch(histories, "world");
  REQUIRE(message.has_value());
  CHECK_THAT(*message, Contains("rank 1 called all_reduce(f32 [3], sum) after calls fingerprinted 000000000000002a"));
  CHECK_THAT(*message, Contains("(the ranks' earlier calls on this communicator differ)"));
}

TEST_CASE("the fingerprint of a sequence depends on every call and on their order", "[cpu][dist]") {
  CollectiveRecord a = all_reduce_record(Tensor::zeros({3}));
  CollectiveRecord b = CollectiveRecord::call(CollectiveOp::Barrier);
  const std::int64_t ab = dist::extend_history(dist::extend_history(0, a), b);
  CHECK(ab == dist::extend_history(dist::extend_history(0, a), b));
  CHECK(ab != dist::extend_history(dist::extend_history(0, b), a));
  CHECK(ab != dist::extend_history(0, a));
}

TEST_CASE("checked collectives that match run as they would unchecked", "[cpu][dist][mpi]") {
  run_matching_collectives(checked_world());
  run_matching_collectives(wrapped_world());
}

TEST_CASE("a mismatched shape, dtype or operation throws on every rank, naming the ranks and both calls",
          "[cpu][dist][mpi]") {
  CommunicatorPtr c = checked_world();
  if (c->size() == 1) return;  // one rank has nobody to disagree with
  run_mismatches(c, "world");
  run_mismatches(wrapped_world(), "wrapped");
}

TEST_CASE("a split of a checked communicator is checked under its own name", "[cpu][dist][mpi]") {
  CommunicatorPtr c = checked_world();
  if (c->size() == 1) return;
  run_split_mismatch(c, "world");
  run_split_mismatch(wrapped_world(), "wrapped");
}

TEST_CASE("a checked async all-reduce does not wait at its call for the other ranks", "[cpu][dist][mpi]") {
  // Rank 0 issues an all-reduce, then a round trip of messages with rank 1, which joins
  // the all-reduce only afterwards. Were the check done at the call, rank 0 would wait
  // there for rank 1, and rank 1 for rank 0's message, until the timeout ended the job.
  CommunicatorPtr c = dist::world({.timeout = 20s, .check_collectives = true});
  if (c->size() == 1) return;
  Tensor sum = Tensor::ones({5});
  Tensor ping = Tensor::full({3}, 42.0), pong = Tensor::zeros({3});
  if (c->rank() == 0) {
    dist::WorkPtr reduction = c->all_reduce_async(sum);
    c->send(ping, 1, 5);
    c->recv(pong, 1, 6);
    reduction->wait();
  } else if (c->rank() == 1) {
    c->recv(pong, 0, 5);
    c->send(pong, 0, 6);
    c->all_reduce(sum);
  } else {
    c->all_reduce(sum);
  }
  CHECK(sum.to_vector<float>() == std::vector<float>(5, static_cast<float>(c->size())));
  if (c->rank() <= 1) CHECK(pong.to_vector<float>() == std::vector<float>(3, 42));
}

TEST_CASE("checking is off unless asked for, and DTRAIN_CHECK_COLLECTIVES turns it on or off", "[cpu][dist]") {
  {
    test::ScopedEnv unset("DTRAIN_CHECK_COLLECTIVES", nullptr);
    CHECK_FALSE(dist::detail::with_environment({}).check_collectives);
    CHECK(dist::detail::with_environment({.check_collectives = true}).check_collectives);
  }
  {
    test::ScopedEnv on("DTRAIN_CHECK_COLLECTIVES", "1");
    CHECK(dist::detail::with_environment({}).check_collectives);
  }
  {
    test::ScopedEnv off("DTRAIN_CHECK_COLLECTIVES", "0");
    CHECK_FALSE(dist::detail::with_environment({.check_collectives = true}).check_collectives);
  }
  test::ScopedEnv bad("DTRAIN_CHECK_COLLECTIVES", "2");
  CHECK_THROWS_WITH(dist::detail::with_environment({}), Contains("DTRAIN_CHECK_COLLECTIVES=2: expected 0 or 1"));
}
