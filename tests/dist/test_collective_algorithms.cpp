// reduce_scatter, all_gather and broadcast with each algorithm forced (CollectiveAlgorithm),
// against results computed in double, at every world size the ctests run (1, 2, 4; 3 and 6
// through the [algorithms] tag, where recursive halving and doubling fold ranks). Sizes:
// empty, one element, fewer elements than ranks, and blocks that span several of the ring's
// (1 MB) and the chain's (256 KB) chunks. SharedMemory runs everywhere (hierarchical in the
// three-host ctest) but reduce_scatter's, which runs on one host only. All collectives of a
// test run before its checks.
#include "dtrain/dist/comm/communicator.h"
#include "support/test_support.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <tuple>
#include <vector>

using namespace dtrain;
using dist::CollectiveAlgorithm;
using dist::CommunicatorPtr;
using Op = dist::ReduceOp;
using Catch::Matchers::Contains;

namespace {

// One communicator per forced (reduce_scatter, all_gather, broadcast) for the whole run;
// every rank makes them in the same order because every rank runs the same tests.
CommunicatorPtr comm_with(CollectiveAlgorithm rs, CollectiveAlgorithm ag, CollectiveAlgorithm bc) {
  static std::map<std::tuple<CollectiveAlgorithm, CollectiveAlgorithm, CollectiveAlgorithm>, CommunicatorPtr> comms;
  CommunicatorPtr& c = comms[{rs, ag, bc}];
  if (!c)
    c = dist::world({.timeout = std::chrono::seconds(60), .reduce_scatter = rs, .all_gather = ag, .broadcast = bc});
  return c;
}

constexpr CollectiveAlgorithm kAuto = CollectiveAlgorithm::Auto;
constexpr CollectiveAlgorithm kShm = CollectiveAlgorithm::SharedMemory;

// Whether every rank is on one host, where reduce_scatter's SharedMemory runs: the np6
// ctest spreads the ranks over three emulated hosts (DTRAIN_HOST_ID), the others leave them
// on one.
bool on_one_host() {
  static const bool one = [] {
    CommunicatorPtr c = comm_with(kAuto, kAuto, kAuto);
    const char* id = std::getenv("DTRAIN_HOST_ID");
    Tensor all = Tensor::full({c->size(), 1}, 0.0, {DType::f64});
    c->all_gather(Tensor::full({1}, id ? std::atof(id) : -1.0, {DType::f64}), all);
    std::vector<double> ids = all.to_vector<double>();
    return std::all_of(ids.begin(), ids.end(), [&](double x) { return x == ids[0]; });
  }();
  return one;
}

// The algorithms of a collective to test here: `own` (Auto, Mpi and the collective's two)
// and SharedMemory, which reduce_scatter runs on one host only.
std::vector<CollectiveAlgorithm> to_test(std::initializer_list<CollectiveAlgorithm> own, bool shm = true) {
  std::vector<CollectiveAlgorithm> all(own);
  if (shm) all.push_back(kShm);
  return all;
}

// Small integers: every sum, mean (of up to 8 ranks) and maximum is exact in each dtype.
double value(int rank, std::int64_t i) { return static_cast<double>((i * 5 + rank * 11) % 19 - 9 + 2 * rank); }

Tensor values(int rank, std::int64_t n, DType dtype, std::int64_t first = 0) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = value(rank, first + i);
  return Tensor::from_vector(v, {n}).to(dtype);
}

// |values|, which unsigned dtypes hold too.
Tensor magnitudes(int rank, std::int64_t n, DType dtype) { return abs(values(rank, n, DType::f64)).to(dtype); }

void require_same(const Tensor& actual, const Tensor& expected) {
  REQUIRE(actual.numel() == expected.numel());
  std::vector<double> a = actual.to_vector<double>(), b = expected.to_vector<double>();
  auto [pa, pb] = std::mismatch(a.begin(), a.end(), b.begin());
  if (pa != a.end()) FAIL("element " << (pa - a.begin()) << " of " << a.size() << ": " << *pa << " vs " << *pb);
}

// Block lengths: empty, 1, and 300'007 f32 (1.2 MB: two ring chunks, five chain chunks).
constexpr std::int64_t kBlocks[] = {0, 1, 300'007};

}  // namespace

TEST_CASE("reduce_scatter equals the direct reduction with every algorithm", "[cpu][dist][algorithms]") {
  struct Run {
    CollectiveAlgorithm algorithm;
    std::int64_t block;
    DType dtype;
    Op op;
    Tensor out;
  };
  std::vector<Run> runs;
  for (CollectiveAlgorithm a :
       to_test({kAuto, CollectiveAlgorithm::Mpi, CollectiveAlgorithm::Ring, CollectiveAlgorithm::RecursiveHalving},
               on_one_host())) {
    CommunicatorPtr c = comm_with(a, kAuto, kAuto);
    const int n = c->size();
    for (std::int64_t block : kBlocks) {
      for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::i64}) {
        for (Op op : {Op::Sum, Op::Mean, Op::Max, Op::Min}) {
          if (op == Op::Mean && !is_floating(dtype)) continue;
          if (block > 1 && dtype != DType::f32) continue;  // the large block once, in f32
          Tensor in = values(c->rank(), n * block, dtype).reshape({n, block});
          Tensor out = Tensor::full({block}, -1.0, {dtype});
          c->reduce_scatter(in, out, op);
          runs.push_back({a, block, dtype, op, out});
        }
      }
    }
  }
  for (const Run& r : runs) {
    CommunicatorPtr c = comm_with(r.algorithm, kAuto, kAuto);
    const int n = c->size();
    std::vector<double> want(static_cast<std::size_t>(r.block));
    for (std::int64_t i = 0; i < r.block; ++i) {
      const std::int64_t at = c->rank() * r.block + i;  // this rank's block of every input
      double acc = value(0, at);
      for (int q = 1; q < n; ++q) {
        const double v = value(q, at);
        acc = r.op == Op::Max ? std::max(acc, v) : r.op == Op::Min ? std::min(acc, v) : acc + v;
      }
      want[static_cast<std::size_t>(i)] = r.op == Op::Mean ? acc / n : acc;
    }
    INFO(dist::collective_algorithm_name(r.algorithm)
         << ", block " << r.block << " x " << dtype_name(r.dtype) << ", op " << static_cast<int>(r.op));
    require_same(r.out, Tensor::from_vector(want, {r.block}).to(r.dtype));
  }
}

TEST_CASE("all_gather stacks every rank's block with every algorithm, in place or not", "[cpu][dist][algorithms]") {
  struct Run {
    CollectiveAlgorithm algorithm;
    std::int64_t block;
    DType dtype;
    Tensor out;
  };
  std::vector<Run> runs;
  for (CollectiveAlgorithm a :
       to_test({kAuto, CollectiveAlgorithm::Mpi, CollectiveAlgorithm::Ring, CollectiveAlgorithm::RecursiveDoubling})) {
    CommunicatorPtr c = comm_with(kAuto, a, kAuto);
    const int n = c->size(), r = c->rank();
    for (std::int64_t block : kBlocks) {
      for (DType dtype : {DType::f32, DType::u8}) {
        if (block > 1 && dtype != DType::f32) continue;
        Tensor out = Tensor::full({n, block}, -1.0, {dtype});
        c->all_gather(magnitudes(r, block, dtype), out);
        runs.push_back({a, block, dtype, out});
        Tensor in_place = Tensor::full({n, block}, -1.0, {dtype});
        in_place.select(0, r).copy_(magnitudes(r, block, dtype));
        c->all_gather(in_place.select(0, r), in_place);
        runs.push_back({a, block, dtype, in_place});
      }
    }
  }
  for (const Run& run : runs) {
    CommunicatorPtr c = comm_with(kAuto, run.algorithm, kAuto);
    for (int q = 0; q < c->size(); ++q) {
      INFO(dist::collective_algorithm_name(run.algorithm)
           << ", block " << run.block << " x " << dtype_name(run.dtype) << ", slot " << q);
      require_same(run.out.select(0, q), magnitudes(q, run.block, run.dtype));
    }
  }
}

TEST_CASE("broadcast copies the root's tensor with every algorithm from every root", "[cpu][dist][algorithms]") {
  struct Run {
    CollectiveAlgorithm algorithm;
    int root;
    std::int64_t count;
    Tensor t;
  };
  std::vector<Run> runs;
  for (CollectiveAlgorithm a :
       to_test({kAuto, CollectiveAlgorithm::Mpi, CollectiveAlgorithm::BinomialTree, CollectiveAlgorithm::Chain})) {
    CommunicatorPtr c = comm_with(kAuto, kAuto, a);
    for (int root = 0; root < c->size(); ++root) {
      for (std::int64_t count : kBlocks) {
        Tensor t = values(c->rank(), count, DType::f32);
        c->broadcast(t, root);
        runs.push_back({a, root, count, t});
      }
    }
  }
  for (const Run& r : runs) {
    INFO(dist::collective_algorithm_name(r.algorithm) << ", root " << r.root << ", " << r.count << " elements");
    require_same(r.t, values(r.root, r.count, DType::f32));
  }
}

TEST_CASE("a collective algorithm forced on the wrong collective is refused, naming the option", "[cpu][dist]") {
  CHECK_THROWS_WITH(dist::world({.broadcast = CollectiveAlgorithm::Ring}),
                    Contains("CommunicatorOptions::broadcast: ring is not an algorithm of broadcast"));
  CHECK_THROWS_WITH(
      dist::world({.reduce_scatter = CollectiveAlgorithm::RecursiveDoubling}),
      Contains("CommunicatorOptions::reduce_scatter: recursive_doubling is not an algorithm of reduce_scatter"));
  CHECK_THROWS_WITH(dist::world({.all_gather = CollectiveAlgorithm::Chain}),
                    Contains("CommunicatorOptions::all_gather: chain is not an algorithm of all_gather"));
  for (CollectiveAlgorithm a :
       {kAuto, CollectiveAlgorithm::Mpi, CollectiveAlgorithm::Ring, CollectiveAlgorithm::RecursiveHalving,
        CollectiveAlgorithm::RecursiveDoubling, CollectiveAlgorithm::BinomialTree, CollectiveAlgorithm::Chain, kShm}) {
    CHECK(dist::parse_collective_algorithm(dist::collective_algorithm_name(a)) == a);
  }
  CHECK_THROWS_WITH(dist::parse_collective_algorithm("tree"), Contains("unknown collective algorithm 'tree'"));
}

TEST_CASE("ranks given different collective algorithms refuse the communicator, every one of them", "[cpu][dist]") {
  const int rank = comm_with(kAuto, kAuto, kAuto)->rank();
  if (comm_with(kAuto, kAuto, kAuto)->size() == 1) return;  // one rank has nobody to disagree with
  // Rank 0 forces the ring while the others let the table choose: the first reduce-scatter
  // would deadlock, so the communicator is refused on every rank when it is made.
  CHECK_THROWS_WITH(dist::world({.reduce_scatter = rank == 0 ? CollectiveAlgorithm::Ring : kAuto}),
                    Contains("the ranks were given different collective algorithms"));
}

TEST_CASE("shared-memory reduce_scatter across hosts is refused on every rank, all_gather runs hierarchical",
          "[cpu][dist]") {
  CommunicatorPtr world = comm_with(kAuto, kAuto, kAuto);
  const int n = world->size(), rank = world->rank();
  // host_id = rank: every rank on a host of its own (one rank: one host).
  auto each_alone = [&](dist::CommunicatorOptions o) {
    o.host_id = rank;
    return dist::world(o);
  };
  CommunicatorPtr c = each_alone({.all_gather = kShm, .broadcast = kShm});
  Tensor all = Tensor::full({n, 3}, -1.0, {DType::f32});
  c->all_gather(values(rank, 3, DType::f32), all);
  Tensor b = values(rank, 4, DType::f32);
  c->broadcast(b, n - 1);
  for (int q = 0; q < n; ++q) require_same(all.select(0, q), values(q, 3, DType::f32));
  require_same(b, values(n - 1, 4, DType::f32));
  if (n == 1) {
    CHECK(each_alone({.reduce_scatter = kShm}) != nullptr);  // one rank, one host: nothing to refuse
    return;
  }
  CHECK_THROWS_WITH(each_alone({.reduce_scatter = kShm}),
                    Contains(fmt::format("CommunicatorOptions::reduce_scatter = shm needs every rank on one host, and "
                                         "its ranks are on {} hosts",
                                         n)));
}
