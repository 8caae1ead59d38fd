// Hosts given by the caller (CommunicatorOptions::host_id, DTRAIN_HOST_ID) instead of the
// ones MPI finds: how emulated hosts on one machine (bench/netns/) reach the hierarchical
// all-reduce. The MPI cases need mpirun with an even number of ranks.
#include "comm/communicator_options.h"
#include "comm/mpi/transport/host_groups.h"
#include "comm/mpi_entry.h"
#include "dtrain/core/environment.h"
#include "dtrain/comm/nccl.h"
#include "support/test_support.h"

#include <mpi.h>

#include <cstdlib>
#include <utility>

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {
int world_size() {
  int initialized = 0, size = 1;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int host_size(int host_id) {
  MPI_Comm host = dist::mpi::split_hosts(MPI_COMM_WORLD, host_id);
  int n = 0;
  MPI_Comm_size(host, &n);
  MPI_Comm_free(&host);
  return n;
}
}  // namespace

TEST_CASE("DTRAIN_HOST_ID sets the host id, and must be a number >= 0", "[cpu][dist]") {
  ::unsetenv("DTRAIN_HOST_ID");
  CHECK(dist::detail::with_environment({}).host_id == -1);
  CHECK(dist::detail::with_environment({.host_id = 3}).host_id == 3);
  ::setenv("DTRAIN_HOST_ID", "2", 1);
  CHECK(dist::detail::with_environment({.host_id = 3}).host_id == 2);
  ::setenv("DTRAIN_HOST_ID", "-1", 1);
  CHECK_THROWS_WITH(dist::detail::with_environment({}), Contains("DTRAIN_HOST_ID=-1: expected a host number >= 0"));
  ::unsetenv("DTRAIN_HOST_ID");
}

TEST_CASE("host ids split the ranks into hosts, on every rank or on none", "[cpu][dist][mpi]") {
  const int size = world_size();
  if (size < 2 || size % 2 != 0) return;
  const int rank = world_rank();
  CHECK(host_size(-1) == size);  // one machine
  CHECK(host_size(rank * 2 / size) == size / 2);
  CHECK(host_size(rank) == 1);
  CHECK_THROWS_WITH(dist::mpi::split_hosts(MPI_COMM_WORLD, rank == 0 ? 0 : -1),
                    Contains("DTRAIN_HOST_ID (CommunicatorOptions::host_id) is set on 1 of the"));
}

TEST_CASE("the hierarchical all-reduce across given hosts sums exactly with every leaders' algorithm",
          "[cpu][dist][mpi][algorithms]") {
  const int size = world_size();
  if (size < 2 || size % 2 != 0) return;
  const int rank = world_rank();
  // Two hosts at 2 and 4 ranks; hosts of two ranks from 6 on (3 leaders: not a power of two).
  const int host = size <= 4 ? rank * 2 / size : rank / 2;
  using A = dist::AllReduceAlgorithm;
  const std::pair<A, A> cases[] = {{A::SharedMemory, A::Auto},
                                   {A::SharedMemory, A::Mpi},
                                   {A::SharedMemory, A::RecursiveDoubling},
                                   {A::SharedMemory, A::Rabenseifner},
                                   {A::Auto, A::Auto}};
  for (auto [algorithm, leaders] : cases) {
    dist::CommunicatorPtr c = dist::world({.all_reduce = algorithm, .leaders_all_reduce = leaders, .host_id = host});
    INFO(dist::algorithm_name(algorithm) << " with " << dist::algorithm_name(leaders) << " among the leaders");
    for (std::int64_t n : {1, 1000, 300'000}) {  // Auto: the table's multi-host choices by size
      Tensor t = Tensor::empty({n});
      float* p = t.data<float>();
      for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>((i + rank * 3) % 7);
      c->all_reduce(t);
      bool exact = true;
      for (std::int64_t i = 0; i < n && exact; ++i) {
        float want = 0;
        for (int r = 0; r < size; ++r) want += static_cast<float>((i + r * 3) % 7);
        exact = p[i] == want;
      }
      CHECK(exact);
    }
  }
}

TEST_CASE("a rank's GPU follows its rank among the ranks of its host as MPI counts them", "[cpu][dist]") {
  auto world = dist::world();  // where the count is taken: a collective point
  if (world->backend() != "mpi") {
    CHECK(dist::detail::mpi_host_rank() == -1);  // no MPI: the launcher's variables, else 0
    CHECK(dist::host_local_rank() == env::local_rank());
    return;
  }
  // One machine: the ranks of this host are all the ranks, in order. This holds under any
  // launcher, where the launcher variables that env::local_rank() reads may be missing.
  CHECK(dist::detail::mpi_host_rank() == world->rank());
  CHECK(dist::host_local_rank() == world->rank());
}
