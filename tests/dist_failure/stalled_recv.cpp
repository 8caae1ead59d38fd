// A job whose rank 0 waits for a message that rank 1, alive, never sends. Rank 0 must not
// hang: its messages are watched like its collectives, so after DTRAIN_TIMEOUT it reports
// the receive and the peer and aborts the job (the default OnTimeout::AbortJob). Run by
// ctest (dist.stalled_recv).
#include "dtrain/comm/communicator.h"

#include <chrono>
#include <thread>

int main() {
  auto world = dtrain::dist::world();
  if (world->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  dtrain::Tensor t = dtrain::Tensor::zeros({4});
  world->irecv(t, 1, 7)->wait();
  return 0;
}
