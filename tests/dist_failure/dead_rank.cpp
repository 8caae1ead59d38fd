// A job whose rank 1 fails before an all-reduce that rank 0 then waits in:
//   dead_rank          rank 1 dies (exit code 3);
//   dead_rank --stall  rank 1 stays alive but never joins (sleeps 120 s).
// Rank 0 must not hang: its watchdog (DTRAIN_TIMEOUT) reports the all-reduce and the peer
// it waits for and aborts the job, which exits non-zero within seconds. Run by ctest
// (dist.dead_rank, dist.stalled_rank) under an mpirun that does not kill the survivors when
// a rank exits non-zero.
#include "dtrain/comm/communicator.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

int main(int argc, char** argv) {
  const bool stall = argc > 1 && std::strcmp(argv[1], "--stall") == 0;
  auto world = dtrain::dist::world();
  if (world->rank() == 1) {
    if (!stall) std::exit(3);
    std::this_thread::sleep_for(std::chrono::seconds(120));
  }
  dtrain::Tensor t = dtrain::Tensor::ones({1024});
  world->all_reduce(t);
  return 0;
}
