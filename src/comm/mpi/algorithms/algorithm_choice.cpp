#include "comm/mpi/algorithms/algorithm_choice.h"

namespace dtrain::dist::mpi {

// The measurements behind the shipped table, and how to measure a machine's own, are in
// docs/COLLECTIVES.md; the table itself is collective_table.json.
AllReduceChoice choose_all_reduce(std::size_t bytes, int ranks, int hosts) {
  return CollectiveTable::active().choose(bytes, ranks, hosts);
}

}  // namespace dtrain::dist::mpi
