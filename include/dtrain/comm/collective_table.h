// The collective table: which algorithm AllReduceAlgorithm::Auto runs for a message of n
// bytes on p ranks over h hosts, and which CollectiveAlgorithm::Auto runs for
// reduce_scatter, all_gather and broadcast. `bench_allreduce --tune-into` measures one (ranks, hosts) case
// and writes it into a table file; the library compiles in the shipped table
// (src/comm/collective_table.json, measured on these machines: docs/COLLECTIVES.md) and
// reads the file DTRAIN_COLLECTIVE_TABLE names instead when that is set; bench/model reads
// the same JSON. The format:
//
//   {"format": "dtrain-allreduce-table/1",
//    "cases": [{"hosts": 2, "ranks": 4, "measured": "free text: where, when, how",
//               "choices": [{"up_to_bytes": 262144, "algorithm": "mpi"},
//                           {"algorithm": "shm+rabenseifner"}],
//               "reduce_scatter": [{"up_to_bytes": 65536, "algorithm": "recursive_halving"},
//                                  {"algorithm": "ring"}],
//               "all_gather": [{"algorithm": "recursive_doubling"}],
//               "broadcast": [{"up_to_bytes": 1048576, "algorithm": "binomial_tree"},
//                             {"algorithm": "chain"}]}]}
//
// A list's steps are in ascending up_to_bytes (inclusive); the last has none and covers
// every larger message. "choices" (all_reduce): mpi, ring, recursive_doubling,
// rabenseifner, shm, and shm+X (the hierarchical scheme with X among the hosts' leaders;
// shm alone means shm+ring). The other three lists are optional (without one, MPI's own
// collective runs) and take mpi and their collective's algorithms (CollectiveAlgorithm).
// Message sizes are the whole message: all_reduce's and broadcast's tensor,
// reduce_scatter's input, all_gather's output.
// A (ranks, hosts) with no case of its own takes the nearest case (in log2 of ranks and of
// hosts) with one host if it has one host, with several if several; with no such case,
// the built-in rule (shared memory on one host; across hosts MPI_Allreduce below 256 KB
// and the hierarchical ring from there).
#pragma once

#include "dtrain/comm/communicator.h"

#include <cstddef>
#include <cstdint>
#include <iterator>
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

// The collectives besides all_reduce whose algorithm the table chooses.
enum class TunedCollective : std::uint8_t { ReduceScatter, AllGather, Broadcast };
inline constexpr TunedCollective kTunedCollectives[] = {TunedCollective::ReduceScatter, TunedCollective::AllGather,
                                                        TunedCollective::Broadcast};
const char* collective_name(TunedCollective c);  // "reduce_scatter": the table's field name
// Whether collective `c` runs algorithm `a` (Mpi, SharedMemory and its own two; never Auto).
bool runs(TunedCollective c, CollectiveAlgorithm a);

class CollectiveTable {
 public:
  template <class Choice>
  struct StepOf {
    std::optional<std::uint64_t> up_to_bytes;  // none: every larger message
    Choice choice;
  };
  using Step = StepOf<AllReduceChoice>;
  using CollectiveStep = StepOf<CollectiveAlgorithm>;
  struct Case {
    int hosts = 1;
    int ranks = 1;
    std::string measured;
    std::vector<Step> choices;  // all_reduce
    // By TunedCollective; an empty list: MPI's own collective.
    std::vector<CollectiveStep> collectives[std::size(kTunedCollectives)];
    std::vector<CollectiveStep>& steps(TunedCollective c) { return collectives[static_cast<std::size_t>(c)]; }
    const std::vector<CollectiveStep>& steps(TunedCollective c) const {
      return collectives[static_cast<std::size_t>(c)];
    }
  };

  // Parses the JSON text; errors name `source` (a file name), the case and the field.
  static CollectiveTable parse(const std::string& text, const std::string& source);
  static CollectiveTable read(const std::string& path);
  // The table Auto uses in this process: DTRAIN_COLLECTIVE_TABLE's file when set, else the
  // shipped one. Read once; a bad file throws (from the first communicator's construction).
  static const CollectiveTable& active();

  AllReduceChoice choose(std::size_t bytes, int ranks, int hosts) const;
  CollectiveAlgorithm choose(TunedCollective c, std::size_t bytes, int ranks, int hosts) const;
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
