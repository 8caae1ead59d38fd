// What AllReduceAlgorithm::Auto runs: the collective table's choice (dtrain/comm/collective_table.h).
#pragma once

#include "dtrain/comm/collective_table.h"

#include <cstddef>

namespace dtrain::dist::mpi {

// Bytes per chunk buffer of the shared-memory algorithm (each rank's slot holds two).
inline constexpr std::size_t kShmChunkBytes = std::size_t{1} << 20;

// The algorithm for a message of `bytes` on `ranks` ranks spread over `hosts` hosts, from
// CollectiveTable::active(). The same on every rank that read the same table.
AllReduceChoice choose_all_reduce(std::size_t bytes, int ranks, int hosts);

}  // namespace dtrain::dist::mpi
