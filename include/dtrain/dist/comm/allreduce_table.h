// The all-reduce table: which algorithm AllReduceAlgorithm::Auto runs for a message of n
// bytes on p ranks over h hosts. `bench_allreduce --tune-into` measures one (ranks, hosts) case
// and writes it into a table file; the library compiles in the shipped table
// (src/dist/comm/allreduce_table.json, measured on these machines: docs/COLLECTIVES.md) and
// reads the file DTRAIN_ALLREDUCE_TABLE names instead when that is set; bench/model reads
// the same JSON. The format:
//
//   {"format": "dtrain-allreduce-table/1",
//    "cases": [{"hosts": 2, "ranks": 4, "measured": "free text: where, when, how",
//               "choices": [{"up_to_bytes": 262144, "algorithm": "mpi"},
//                           {"algorithm": "shm+rabenseifner"}]}]}
//
// A case's choices are in ascending up_to_bytes (inclusive); the last has none and covers
// every larger message. Algorithms: mpi, ring, recursive_doubling, rabenseifner, shm, and
// shm+X (the hierarchical scheme with X among the hosts' leaders; shm alone means shm+ring).
// A (ranks, hosts) with no case of its own takes the nearest case (in log2 of ranks and of
// hosts) with one host if it has one host, with several if several; with no such case,
// the built-in rule (shared memory on one host; across hosts MPI_Allreduce below 256 KB
// and the hierarchical ring from there).
#pragma once

#include "dtrain/dist/comm/communicator.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::dist {

struct AllReduceChoice {
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::SharedMemory;
  // With SharedMemory across hosts: what the hosts' leaders run among themselves.
  AllReduceAlgorithm leaders = AllReduceAlgorithm::Ring;
};
std::string choice_name(const AllReduceChoice& c);  // "mpi", "shm" (with the ring), "shm+mpi"
// Throws naming `where` and the text when it is not one of the table's algorithm names.
AllReduceChoice parse_choice(const std::string& text, const std::string& where);

class AllReduceTable {
 public:
  struct Step {
    std::optional<std::uint64_t> up_to_bytes;  // none: every larger message
    AllReduceChoice choice;
  };
  struct Case {
    int hosts = 1;
    int ranks = 1;
    std::string measured;
    std::vector<Step> choices;
  };

  // Parses the JSON text; errors name `source` (a file name), the case and the field.
  static AllReduceTable parse(const std::string& text, const std::string& source);
  static AllReduceTable read(const std::string& path);
  // The table Auto uses in this process: DTRAIN_ALLREDUCE_TABLE's file when set, else the
  // shipped one. Read once; a bad file throws (from the first communicator's construction).
  static const AllReduceTable& active();

  AllReduceChoice choose(std::size_t bytes, int ranks, int hosts) const;
  // The case choose() consults for (ranks, hosts), or null for the built-in rule.
  const Case* find(int ranks, int hosts) const;
  // Adds the case, or replaces the one with its (ranks, hosts).
  void put(Case c);
  std::string to_json() const;
  // Equal on every rank that read the same table: compared across the ranks when an MPI
  // communicator is made, since ranks that choose differently would deadlock.
  std::uint64_t fingerprint() const;
  const std::vector<Case>& cases() const { return cases_; }
  const std::string& source() const { return source_; }

 private:
  std::vector<Case> cases_;
  std::string source_;
};

}  // namespace dtrain::dist
