// Every environment variable dtrain reads is read here, in one place.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace dtrain::env {

// The variable's value, or nullopt when unset or empty.
std::optional<std::string> get(const char* name);
// An integer variable; throws dtrain::Error naming the variable if it is set but not an integer.
std::optional<long> get_int(const char* name);

// Ranks on this host and this rank's index among them, from the launcher's variables
// (Open MPI, MPICH/Hydra, Slurm); 1 and 0 when not launched by one.
int local_world_size();
int local_rank();
// Hardware threads of this machine (at least 1).
int hardware_threads();
// Bytes of freed CPU tensor memory kept for reuse: DTRAIN_CPU_CACHE_MB if set (0 turns
// the cache off), else a quarter of physical memory shared by the ranks of this host,
// at most 8 GiB per rank.
std::size_t cpu_cache_limit_bytes();
// Microseconds an idle thread of the intra-op pool polls for work before it blocks, as
// set by DTRAIN_SPIN_US (0 blocks at once; throws naming the variable unless 0 to
// 1000000), else nullopt and the pool chooses (dtrain::pool_spin_us(), parallel.cpp).
std::optional<long> spin_us_override();

}  // namespace dtrain::env
