// The Communicator API against direct computations, at any world size: 1 (a plain process,
// the local communicator) and 2 or 4 under mpirun. Rank r's input is a function of r and
// the element index, so every rank can compute every other rank's input and the expected
// result. All collectives of a test run before its checks, so that a failing check on one
// rank cannot leave the others waiting in a collective.
#include "dtrain/core/environment.h"
#include "dtrain/comm/communicator.h"
#include "support/test_support.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

using namespace dtrain;
using dist::AllReduceAlgorithm;
using dist::CommunicatorPtr;
using Op = dist::ReduceOp;  // Mean: the average over the ranks
using Catch::Matchers::Contains;

namespace {

constexpr AllReduceAlgorithm kAlgorithms[] = {AllReduceAlgorithm::Auto,
                                              AllReduceAlgorithm::Mpi,
                                              AllReduceAlgorithm::Ring,
                                              AllReduceAlgorithm::SharedMemory,
                                              AllReduceAlgorithm::RecursiveDoubling,
                                              AllReduceAlgorithm::Rabenseifner};
// The 16-bit floats too: MPI reduces them with operations of dtrain's own. The inputs below
// and their sums and means over up to 4 ranks are exact in both.
constexpr DType kReducible[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};

// One communicator per algorithm for the whole run; every rank creates them in the same
// order because every rank runs the same tests.
CommunicatorPtr comm(AllReduceAlgorithm algorithm = AllReduceAlgorithm::Auto) {
  static std::map<AllReduceAlgorithm, CommunicatorPtr> comms;
  auto& c = comms[algorithm];
  if (!c) c = dist::world({.timeout = std::chrono::seconds(60), .all_reduce = algorithm});
  return c;
}

// Small integers, exact in every dtype and in any sum of a few of them.
double input_value(int rank, std::int64_t i) { return static_cast<double>((i * 7 + rank * 13) % 17 - 8 + 3 * rank); }

Tensor rank_input(int rank, std::int64_t n, DType dtype, std::int64_t first = 0) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = input_value(rank, first + i);
  return Tensor::from_vector(v, {n}).to(dtype);
}

// The same, shifted to be non-negative (for u8).
Tensor rank_bytes(int rank, std::int64_t n, DType dtype) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = input_value(rank, i) + 8;
  return Tensor::from_vector(v, {n}).to(dtype);
}

// The reduction over `ranks` of their inputs, in double.
Tensor expected_reduction(const std::vector<int>& ranks, std::int64_t n, DType dtype, Op op, std::int64_t first = 0) {
  std::vector<double> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    double acc = input_value(ranks[0], first + i);
    for (std::size_t k = 1; k < ranks.size(); ++k) {
      double v = input_value(ranks[k], first + i);
      acc = op == Op::Max ? std::max(acc, v) : op == Op::Min ? std::min(acc, v) : acc + v;
    }
    out[static_cast<std::size_t>(i)] = op == Op::Mean ? acc / static_cast<double>(ranks.size()) : acc;
  }
  return Tensor::from_vector(out, {n}).to(dtype);
}

// Exact comparison: the inputs are small integers, so every algorithm's result is exact.
// Reports only the first difference, which keeps large tensors fast.
void require_equal(const Tensor& actual, const Tensor& expected) {
  REQUIRE(actual.shape() == expected.shape());
  REQUIRE(actual.dtype() == expected.dtype());
  std::vector<double> a = actual.to_vector<double>(), b = expected.to_vector<double>();
  auto [pa, pb] = std::mismatch(a.begin(), a.end(), b.begin());
  if (pa != a.end()) FAIL("element " << (pa - a.begin()) << " of " << a.size() << ": " << *pa << " vs " << *pb);
}

std::vector<int> all_ranks(int size) {
  std::vector<int> r(static_cast<std::size_t>(size));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

}  // namespace

TEST_CASE("world matches the launcher and ranks are distinct", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  long launched = 1;
  if (auto n = dtrain::env::get_int("OMPI_COMM_WORLD_SIZE")) launched = *n;
  Tensor ranks = Tensor::empty({c->size()}, {DType::i32});
  c->all_gather(Tensor::full({}, c->rank(), {DType::i32}), ranks);
  c->barrier();

  CHECK(c->size() == launched);
  CHECK(c->backend() == (launched > 1 ? "mpi" : "local"));
  std::vector<int> expected = all_ranks(c->size());
  CHECK(ranks.to_vector<int>() == expected);
}

TEST_CASE("all_reduce equals the direct reduction for every algorithm, dtype, op and size", "[cpu][dist][algorithms]") {
  for (AllReduceAlgorithm algorithm : kAlgorithms) {
    CommunicatorPtr c = comm(algorithm);
    std::vector<int> ranks = all_ranks(c->size());
    // 1 element, fewer elements than ranks, a size not divisible by the rank count, and one
    // spanning several chunks of the ring and shared-memory algorithms.
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{3}, std::int64_t{2 * c->size() + 1}, std::int64_t{1001}}) {
      for (DType dtype : kReducible) {
        for (Op op : {Op::Sum, Op::Mean, Op::Max, Op::Min}) {
          if (op == Op::Mean && !is_floating(dtype)) continue;
          Tensor t = rank_input(c->rank(), n, dtype);
          c->all_reduce(t, op);
          INFO("algorithm " << dist::algorithm_name(algorithm) << ", " << n << " x " << dtype_name(dtype) << ", op "
                            << static_cast<int>(op));
          require_equal(t, expected_reduction(ranks, n, dtype, op));
        }
      }
    }
  }
}

TEST_CASE("all_reduce of several megabytes crosses chunk boundaries correctly", "[cpu][dist][algorithms]") {
  // 1.25M f32 = 5 MB: several shared-memory chunks (1 MB) and several ring chunks (1 MB)
  // per segment at 2 and 4 ranks.
  constexpr std::int64_t n = 1'250'003;
  for (AllReduceAlgorithm algorithm : kAlgorithms) {
    CommunicatorPtr c = comm(algorithm);
    Tensor t = rank_input(c->rank(), n, DType::f32);
    c->all_reduce(t, Op::Sum);
    INFO("algorithm " << dist::algorithm_name(algorithm));
    require_equal(t, expected_reduction(all_ranks(c->size()), n, DType::f32, Op::Sum));
  }
}

TEST_CASE("async all_reduces in flight at once complete in any wait order", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  const std::vector<std::int64_t> sizes = {3, 1000, 100'000, 17, 5, 300'000};
  std::vector<Tensor> tensors;
  std::vector<dist::WorkPtr> works;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    tensors.push_back(rank_input(c->rank(), sizes[k], k % 2 ? DType::f64 : DType::f32, static_cast<std::int64_t>(k)));
    works.push_back(c->all_reduce_async(tensors.back(), k % 3 == 2 ? Op::Max : Op::Sum));
  }
  Tensor root_value = Tensor::full({4}, c->rank() == 0 ? 42 : -1);
  c->broadcast(root_value, 0);  // queued behind the all-reduces
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();

  for (std::size_t k = 0; k < sizes.size(); ++k) {
    INFO("tensor " << k);
    require_equal(tensors[k], expected_reduction(all_ranks(c->size()), sizes[k], tensors[k].dtype(),
                                                 k % 3 == 2 ? Op::Max : Op::Sum, static_cast<std::int64_t>(k)));
  }
  require_equal(root_value, Tensor::full({4}, 42));
}

TEST_CASE("broadcast copies the root's tensor from every root in every dtype", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  std::vector<Tensor> results;
  for (int root = 0; root < c->size(); ++root) {
    for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8}) {
      Tensor t = rank_bytes(c->rank(), 37, dtype);
      c->broadcast(t, root);
      results.push_back(t);
    }
  }
  std::size_t k = 0;
  for (int root = 0; root < c->size(); ++root) {
    for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8}) {
      INFO("root " << root << ", " << dtype_name(dtype));
      require_equal(results[k++], rank_bytes(root, 37, dtype));
    }
  }
}

TEST_CASE("all_gather stacks every rank's tensor in rank order", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  Tensor in = rank_input(c->rank(), 6, DType::f32).reshape({2, 3});
  Tensor out = Tensor::empty({c->size(), 2, 3});
  c->all_gather(in, out);
  Tensor in_bytes = rank_bytes(c->rank(), 5, DType::u8);
  Tensor out_bytes = Tensor::empty({c->size(), 5}, {DType::u8});
  c->all_gather(in_bytes, out_bytes);

  for (int r = 0; r < c->size(); ++r) {
    INFO("slot " << r);
    require_equal(out.select(0, r), rank_input(r, 6, DType::f32).reshape({2, 3}));
    require_equal(out_bytes.select(0, r), rank_bytes(r, 5, DType::u8));
  }
}

TEST_CASE("all_gather runs in place when in is this rank's slot of out, and refuses other overlaps", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  const int n = c->size(), r = c->rank();
  Tensor out = Tensor::full({n, 4}, -1.0);
  out.select(0, r).copy_(rank_input(r, 4, DType::f32));
  c->all_gather_async(out.select(0, r), out)->wait();
  // Another rank's slot (or a part of one's own) as the input: refused before anything is
  // sent, by every rank.
  // (One rank has no other slot.)
  Tensor other = Tensor::zeros({n, 4});
  using Catch::Matchers::Contains;
  if (n > 1) {
    CHECK_THROWS_WITH(c->all_gather(other.select(0, (r + 1) % n), other),
                      Contains("in shares out's memory but is not out[" + std::to_string(r) + "]"));
  }
  for (int q = 0; q < n; ++q) {
    INFO("slot " << q);
    require_equal(out.select(0, q), rank_input(q, 4, DType::f32));
  }
}

TEST_CASE("reduce_scatter gives rank r the reduction of every rank's row r", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  const int n = c->size();
  constexpr std::int64_t kRow = 7;
  std::vector<Tensor> outs;
  for (DType dtype : kReducible) {
    for (Op op : {Op::Sum, Op::Mean, Op::Max}) {
      if (op == Op::Mean && !is_floating(dtype)) continue;
      // Row j of rank r's input is elements [j*kRow, (j+1)*kRow) of rank_input(r).
      Tensor in = rank_input(c->rank(), n * kRow, dtype).reshape({n, kRow});
      Tensor out = Tensor::empty({kRow}, {dtype});
      c->reduce_scatter(in, out, op);
      outs.push_back(out);
    }
  }
  std::size_t k = 0;
  for (DType dtype : kReducible) {
    for (Op op : {Op::Sum, Op::Mean, Op::Max}) {
      if (op == Op::Mean && !is_floating(dtype)) continue;
      INFO(dtype_name(dtype) << ", op " << static_cast<int>(op));
      require_equal(outs[k++], expected_reduction(all_ranks(n), kRow, dtype, op, c->rank() * kRow));
    }
  }
}

TEST_CASE("all_gather_async and reduce_scatter_async run in call order beside all_reduce_async", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  const int n = c->size();
  constexpr std::int64_t kRow = 5;
  // Queued together and waited on in reverse: each must still see its own inputs, and the
  // reduce-scatter reads the gather's output only because it was called after it.
  Tensor mine = rank_input(c->rank(), kRow, DType::f32);
  Tensor gathered = Tensor::empty({n, kRow});
  Tensor reduced = rank_input(c->rank(), 3, DType::f64);
  Tensor scattered = Tensor::empty({kRow});
  dist::WorkPtr gather = c->all_gather_async(mine, gathered);
  dist::WorkPtr reduce = c->all_reduce_async(reduced, Op::Sum);
  dist::WorkPtr scatter = c->reduce_scatter_async(gathered, scattered, Op::Mean);
  scatter->wait();
  reduce->wait();
  gather->wait();
  for (int r = 0; r < n; ++r) {
    INFO("slot " << r);
    require_equal(gathered.select(0, r), rank_input(r, kRow, DType::f32));
  }
  // Every rank scatters the same gathered rows, so the mean of row r is rank r's input.
  require_equal(scattered, rank_input(c->rank(), kRow, DType::f32));
  require_equal(reduced, expected_reduction(all_ranks(n), 3, DType::f64, Op::Sum, 0));
}

TEST_CASE("send and recv pass tensors around the ring, small and large", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  const int n = c->size();
  if (n == 1) {
    Tensor t = Tensor::zeros({3});
    CHECK_THROWS_WITH(c->send(t, 0, 0), Contains("send: no peer"));
    CHECK_THROWS_WITH(c->recv(t, 0, 0), Contains("recv: no peer"));
    return;
  }
  const int right = (c->rank() + 1) % n, left = (c->rank() + n - 1) % n;
  std::vector<Tensor> received;
  for (std::int64_t size : {std::int64_t{5}, std::int64_t{200'000}}) {  // eager and rendezvous protocols
    Tensor mine = rank_input(c->rank(), size, DType::f32);
    Tensor theirs = Tensor::empty({size});
    // Even ranks send first, odd ranks receive first: no rank waits on a peer that waits on it.
    if (c->rank() % 2 == 0) {
      c->send(mine, right, c->rank());
      c->recv(theirs, left, left);
    } else {
      c->recv(theirs, left, left);
      c->send(mine, right, c->rank());
    }
    received.push_back(theirs);
  }
  require_equal(received[0], rank_input(left, 5, DType::f32));
  require_equal(received[1], rank_input(left, 200'000, DType::f32));
}

TEST_CASE("recv of a message of the wrong size fails naming both sizes", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  if (c->size() == 1) return;
  if (c->rank() == 0) c->send(Tensor::zeros({5}), 1, 9);
  if (c->rank() == 1) {
    Tensor small = Tensor::zeros({4});
    CHECK_THROWS_WITH(c->recv(small, 0, 9),
                      Contains("recv: expected 16 bytes (4 x f32) from rank 0 with tag 9, got 20 bytes"));
  }
  c->barrier();
}

TEST_CASE("split forms sub-groups by color, ordered by key", "[cpu][dist]") {
  for (AllReduceAlgorithm algorithm : {AllReduceAlgorithm::Auto, AllReduceAlgorithm::SharedMemory}) {
    CommunicatorPtr c = comm(algorithm);
    const int rank = c->rank(), n = c->size();
    CommunicatorPtr parity = c->split(rank % 2, rank);
    CommunicatorPtr reversed = c->split(0, -rank);
    Tensor t = rank_input(rank, 11, DType::f64);
    parity->all_reduce(t, Op::Sum);
    Tensor order = Tensor::full({}, rank, {DType::i64});
    Tensor gathered = Tensor::empty({n}, {DType::i64});
    reversed->all_gather(order, gathered);
    parity->barrier();

    std::vector<int> group;
    for (int r = rank % 2; r < n; r += 2) group.push_back(r);
    INFO("algorithm " << dist::algorithm_name(algorithm));
    CHECK(parity->size() == static_cast<int>(group.size()));
    CHECK(parity->rank() == rank / 2);
    CHECK(reversed->rank() == n - 1 - rank);
    require_equal(t, expected_reduction(group, 11, DType::f64, Op::Sum));
    std::vector<std::int64_t> descending(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) descending[static_cast<std::size_t>(r)] = n - 1 - r;
    CHECK(gathered.to_vector<std::int64_t>() == descending);
  }
}

TEST_CASE("collectives reject bad tensors with a message naming the op", "[cpu][dist]") {
  CommunicatorPtr c = comm();
  const int n = c->size();
  Tensor matrix = Tensor::zeros({3, 4});
  Tensor transposed = matrix.t();
  CHECK_THROWS_WITH(c->all_reduce(transposed), Contains("all_reduce: expected a contiguous tensor"));
  Tensor bytes = Tensor::zeros({3}, {DType::u8});
  CHECK_THROWS_WITH(c->all_reduce(bytes), Contains("all_reduce: dtype u8 cannot be reduced"));
  Tensor ints = Tensor::zeros({3}, {DType::i32});
  CHECK_THROWS_WITH(c->all_reduce(ints, Op::Mean), Contains("all_reduce: mean needs a floating dtype"));
  Tensor undefined;
  CHECK_THROWS_WITH(c->broadcast(undefined, 0), Contains("broadcast: tensor is undefined"));
  Tensor v = Tensor::zeros({3});
  CHECK_THROWS_WITH(c->broadcast(v, n), Contains("broadcast: root " + std::to_string(n) + " is out of range"));
  Tensor wrong = Tensor::zeros({n, 4});
  CHECK_THROWS_WITH(c->all_gather(v, wrong),
                    Contains("all_gather: out must have shape [" + std::to_string(n) +
                             ", 3] (ranks x in.shape) and dtype f32, got [" + std::to_string(n) + ", 4] f32"));
  Tensor out = Tensor::zeros({3}, {DType::f64});
  Tensor in = Tensor::zeros({n, 3});
  CHECK_THROWS_WITH(c->reduce_scatter(in, out), Contains("reduce_scatter: in must have shape"));
  CHECK_THROWS_WITH(c->split(-1, 0), Contains("split: color must be >= 0, got -1"));
  if (n > 1) {
    CHECK_THROWS_WITH(c->send(v, c->rank(), 0), Contains("send: dst " + std::to_string(c->rank()) + " is this rank"));
    CHECK_THROWS_WITH(c->recv(v, n + 3, 0), Contains("recv: src " + std::to_string(n + 3) + " is out of range"));
  }
}

TEST_CASE("algorithm names round-trip and unknown names are rejected", "[cpu][dist]") {
  for (AllReduceAlgorithm a : kAlgorithms) CHECK(dist::parse_algorithm(dist::algorithm_name(a)) == a);
  CHECK_THROWS_WITH(dist::parse_algorithm("tree"), Contains("unknown all-reduce algorithm 'tree'"));
}

namespace {

// A work that finishes when told to, or fails with `error` on every wait.
class ScriptedWork final : public dist::Work {
 public:
  explicit ScriptedWork(std::string error = "") : error_(std::move(error)) {}
  void wait() override {
    ++waits;
    if (!error_.empty()) throw std::runtime_error(error_);
  }
  int waits = 0;

 private:
  std::string error_;
};

}  // namespace

TEST_CASE("then runs its continuation once, after the work, and releases what it holds", "[cpu][dist]") {
  auto work = std::make_shared<ScriptedWork>();
  auto held = std::make_shared<int>(7);
  int runs = 0;
  dist::WorkPtr chained = dist::then(work, [&runs, held] { runs += *held; });
  CHECK(held.use_count() == 2);  // the continuation holds it until it has run
  CHECK(runs == 0);              // nothing runs before a wait
  chained->wait();
  chained->wait();
  CHECK(runs == 7);
  CHECK(work->waits == 2);       // the work is waited on each time (a failure would rethrow)
  CHECK(held.use_count() == 1);  // released once run

  auto failing = std::make_shared<ScriptedWork>("the sum failed");
  bool ran = false;
  dist::WorkPtr after_failure = dist::then(failing, [&ran] { ran = true; });
  CHECK_THROWS_WITH(after_failure->wait(), Contains("the sum failed"));
  CHECK_THROWS_WITH(after_failure->wait(), Contains("the sum failed"));  // on every wait
  CHECK_FALSE(ran);

  auto first = std::make_shared<ScriptedWork>(), second = std::make_shared<ScriptedWork>();
  dist::when_all({first, second})->wait();
  CHECK((first->waits == 1 && second->waits == 1));
  CHECK_THROWS_WITH(dist::when_all({first, std::make_shared<ScriptedWork>("a send failed")})->wait(),
                    Contains("a send failed"));
}
