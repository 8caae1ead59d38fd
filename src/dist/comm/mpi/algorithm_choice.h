// The all-reduce tuning taken from bench_allreduce measurements (numbers in the .cpp).
#pragma once

#include "dtrain/dist/comm/communicator.h"

#include <cstddef>

namespace dtrain::dist::mpi {

// Bytes per chunk buffer of the shared-memory algorithm (each rank's slot holds two).
inline constexpr std::size_t kShmChunkBytes = std::size_t{1} << 20;

// The algorithm Auto runs for a message of `bytes` on a communicator whose ranks all share
// one host (single_host) or not.
AllReduceAlgorithm choose_all_reduce(std::size_t bytes, bool single_host);

}  // namespace dtrain::dist::mpi
