#include "dtrain/comm/peer_recovery.h"

#include "dtrain/core/error.h"

namespace dtrain::dist {

PeerRecovery& peer_recovery(Communicator& comm, std::string_view what) {
  auto* recovery = dynamic_cast<PeerRecovery*>(&comm);
  DTRAIN_CHECK(recovery != nullptr,
               "{}: the {} backend cannot serve several peers from one thread or go on without a lost one "
               "(MPI can)",
               what, comm.backend());
  return *recovery;
}

}  // namespace dtrain::dist
