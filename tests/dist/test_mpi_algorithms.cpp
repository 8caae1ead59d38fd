// The shared-memory and ring all-reduce and the shared-memory reduce-scatter, all-gather
// and broadcast on their own, with settings the communicator never uses: chunks of 4 KB and
// less (many generations through both buffers of every slot) and a fake host
// layout that splits the ranks into two "hosts", to exercise the hierarchical scheme
// (host reduce, ring among leaders, host broadcast) on one machine. Needs mpirun.
#include "comm/mpi/algorithms/ring_allreduce.h"
#include "comm/mpi/algorithms/shm_allreduce.h"
#include "comm/mpi/algorithms/shm_collectives.h"
#include "support/test_support.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <vector>

using namespace dtrain;
using Op = dist::ReduceOp;  // Mean: the average over the ranks

namespace {
bool mpi_with_peers() {
  int initialized = 0, size = 1;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size > 1;
}

double value(int rank, std::size_t i) {
  return static_cast<double>((i * 5 + static_cast<std::size_t>(rank) * 3) % 11) - 5;
}

std::vector<double> input(int rank, std::size_t n) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(rank, i);
  return v;
}

std::vector<double> expected(int size, std::size_t n, Op op) {
  std::vector<double> v = input(0, n);
  for (int r = 1; r < size; ++r) {
    for (std::size_t i = 0; i < n; ++i) v[i] = op == Op::Min ? std::min(v[i], value(r, i)) : v[i] + value(r, i);
  }
  if (op == Op::Mean) {
    for (double& x : v) x /= size;  // integer sums: exact, whatever the order of the additions
  }
  return v;
}
}  // namespace

TEST_CASE("shared-memory all-reduce with small chunks, on the real and on a fake two-host layout", "[cpu][dist][mpi]") {
  if (!mpi_with_peers()) return;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm real_host, fake_host;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &real_host);
  MPI_Comm_split(MPI_COMM_WORLD, rank * 2 / size, rank, &fake_host);  // ranks [0, n/2) and [n/2, n)
  std::vector<std::vector<double>> results;
  for (MPI_Comm host : {real_host, fake_host}) {
    dist::mpi::ShmAllReduce shm(MPI_COMM_WORLD, host, 4096);
    for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{5003}}) {
      for (Op op : {Op::Sum, Op::Min, Op::Mean}) {  // Mean: divided inside, on one host and across hosts
        std::vector<double> v = input(rank, n);
        shm.run(v.data(), n, DType::f64, op);
        results.push_back(v);
      }
    }
  }
  MPI_Comm_free(&real_host);
  MPI_Comm_free(&fake_host);

  std::size_t k = 0;
  for (const char* layout : {"real host", "two fake hosts"}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{5003}}) {
      for (Op op : {Op::Sum, Op::Min, Op::Mean}) {
        INFO(layout << ", " << n << " elements, op " << static_cast<int>(op));
        CHECK(results[k++] == expected(size, n, op));
      }
    }
  }
}

TEST_CASE("shared-memory broadcast, all-gather and reduce-scatter with small chunks, mixed on one window",
          "[cpu][dist][mpi]") {
  if (!mpi_with_peers()) return;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm host;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host);
  int host_size = 0;
  MPI_Comm_size(host, &host_size);
  REQUIRE(host_size == size);  // mpirun here starts every rank on this machine
  {
    // 256-byte chunks: a reduce-scatter piece of 256 / 8 / size f64 (uneven at 3 ranks), so a
    // 37-element block takes several generations, and broadcast's readers (which skip the
    // reuse wait) are followed by collectives that write their own slots.
    dist::mpi::ShmCollectives shm(MPI_COMM_WORLD, host, 256);
    for (int round = 0; round < 3 * size; ++round) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{37}}) {
        const int root = round % size;
        std::vector<double> b = input(rank, n);
        shm.broadcast(b.data(), n * sizeof(double), root);
        CHECK(b == input(root, n));

        std::vector<double> all(n * static_cast<std::size_t>(size), -1.0);
        const std::vector<double> mine = input(rank, n);
        shm.all_gather(mine.data(), all.data(), n * sizeof(double));
        for (int q = 0; q < size; ++q) {
          INFO("all_gather, round " << round << ", " << n << " elements, block " << q);
          CHECK(std::vector<double>(all.begin() + static_cast<std::ptrdiff_t>(q * n),
                                    all.begin() + static_cast<std::ptrdiff_t>((q + 1) * n)) == input(q, n));
        }

        const std::size_t whole = n * static_cast<std::size_t>(size);
        std::vector<double> out(n, -1.0);
        shm.reduce_scatter(input(rank, whole).data(), out.data(), n, DType::f64, Op::Sum);
        const std::vector<double> sum = expected(size, whole, Op::Sum);
        INFO("reduce_scatter, round " << round << ", " << n << " elements");
        CHECK(out == std::vector<double>(sum.begin() + static_cast<std::ptrdiff_t>(rank * n),
                                         sum.begin() + static_cast<std::ptrdiff_t>((rank + 1) * n)));
      }
    }
  }
  MPI_Comm_free(&host);
}

TEST_CASE("hierarchical shared-memory broadcast, all-gather and reduce-scatter over hosts of interleaved ranks",
          "[cpu][dist][mpi]") {
  if (!mpi_with_peers()) return;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Two fake hosts, the even and the odd ranks: a host's ranks are not contiguous, so the
  // leaders' gather must put each block back at its rank's place; and numbered in reverse,
  // so that a host's rank order is not its ranks' order in the world (its leader, host
  // rank 0, is its last rank).
  MPI_Comm host;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &host);
  {
    dist::mpi::ShmCollectives shm(MPI_COMM_WORLD, host, 256);
    for (int root = 0; root < size; ++root) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{37}}) {
        std::vector<double> b = input(rank, n);
        shm.broadcast(b.data(), n * sizeof(double), root);
        CHECK(b == input(root, n));
        std::vector<double> all(n * static_cast<std::size_t>(size), -1.0);
        // In place: this rank's block of `all` is its input.
        std::copy_n(input(rank, n).begin(), n, all.begin() + static_cast<std::ptrdiff_t>(rank * n));
        shm.all_gather(all.data() + rank * n, all.data(), n * sizeof(double));
        for (int q = 0; q < size; ++q) {
          INFO("root " << root << ", " << n << " elements, block " << q);
          CHECK(std::vector<double>(all.begin() + static_cast<std::ptrdiff_t>(q * n),
                                    all.begin() + static_cast<std::ptrdiff_t>((q + 1) * n)) == input(q, n));
        }
      }
    }
    // Reduce-scatter needs hosts of equal size: at an even world size they are. Each region
    // (a host rank's blocks of both hosts) is cut across its two blocks by the 256-byte
    // chunks (16 doubles a piece at 2 ranks a host) once a block passes 16 elements.
    if (size % 2 == 0) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{37}}) {
        for (Op op : {Op::Sum, Op::Min}) {
          const std::size_t whole = n * static_cast<std::size_t>(size);
          std::vector<double> out(n, -1.0);
          shm.reduce_scatter(input(rank, whole).data(), out.data(), n, DType::f64, op);
          const std::vector<double> want = expected(size, whole, op);
          INFO("reduce_scatter, " << n << " elements, op " << static_cast<int>(op));
          CHECK(out == std::vector<double>(want.begin() + static_cast<std::ptrdiff_t>(rank * n),
                                           want.begin() + static_cast<std::ptrdiff_t>((rank + 1) * n)));
        }
      }
    }
  }
  MPI_Comm_free(&host);
}

TEST_CASE("shared-memory reduce-scatter over hosts of unequal size is refused on every rank", "[cpu][dist][mpi]") {
  if (!mpi_with_peers()) return;
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 3) return;  // one or two ranks cannot make hosts of unequal size with two ranks on one
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm host;  // rank 0 alone, the others together
  MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? 0 : 1, rank, &host);
  {
    dist::mpi::ShmCollectives shm(MPI_COMM_WORLD, host, 256);
    CHECK_FALSE(shm.even_hosts());
    std::vector<double> out(2);
    CHECK_THROWS_WITH(
        shm.reduce_scatter(input(rank, 2 * static_cast<std::size_t>(size)).data(), out.data(), 2, DType::f64, Op::Sum),
        Catch::Matchers::Contains(fmt::format("shared-memory reduce_scatter across hosts needs the same number of "
                                              "ranks on every host, and this rank's host holds {} of the {} ranks "
                                              "on 2 hosts",
                                              rank == 0 ? 1 : size - 1, size)));
    // The window still works for the others after the refusal: nobody was left waiting.
    std::vector<double> b = input(rank, 5);
    shm.broadcast(b.data(), b.size() * sizeof(double), size - 1);
    CHECK(b == input(size - 1, 5));
  }
  MPI_Comm_free(&host);
}

TEST_CASE("ring all-reduce over a sub-communicator in reverse rank order", "[cpu][dist][mpi]") {
  if (!mpi_with_peers()) return;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm reversed;
  MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &reversed);
  std::vector<std::int32_t> v(77'777);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int32_t>(value(rank, i));
  {
    dist::mpi::RingAllReduce ring(reversed);
    ring.run(v.data(), v.size(), DType::i32, Op::Sum);
  }
  MPI_Comm_free(&reversed);
  std::vector<double> want = expected(size, v.size(), Op::Sum);
  std::vector<double> got(v.begin(), v.end());
  CHECK(got == want);
}
