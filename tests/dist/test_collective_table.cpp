// The collective table: parsing with errors that name the file and field, the lookup by
// size, ranks and hosts (exact case, nearest case, built-in rule), writing and the
// fingerprint that ranks compare. Pure functions: they run on one rank.
#include "dtrain/comm/collective_table.h"
#include "support/test_support.h"

#include <fstream>

using namespace dtrain;
using Catch::Matchers::Contains;
using dist::AllReduceAlgorithm;
using dist::CollectiveTable;

namespace {
const char* kTable = R"({"format": "dtrain-allreduce-table/1", "cases": [
  {"hosts": 1, "ranks": 2, "measured": "one host",
   "choices": [{"up_to_bytes": 4096, "algorithm": "recursive_doubling"},
               {"up_to_bytes": 1048576, "algorithm": "rabenseifner"},
               {"algorithm": "shm"}]},
  {"hosts": 2, "ranks": 4,
   "choices": [{"up_to_bytes": 65536, "algorithm": "mpi"}, {"algorithm": "shm+rabenseifner"}]}]})";

std::string name(const dist::AllReduceChoice& c) { return dist::choice_name(c); }

std::string with_choices(const std::string& choices) {
  return R"({"format": "dtrain-allreduce-table/1", "cases": [{"hosts": 1, "ranks": 2, "choices": )" + choices + "}]}";
}
}  // namespace

TEST_CASE("the collective table chooses by size within the case of the ranks and hosts", "[cpu][dist]") {
  CollectiveTable t = CollectiveTable::parse(kTable, "t.json");
  CHECK(name(t.choose(4, 2, 1)) == "recursive_doubling");
  CHECK(name(t.choose(4096, 2, 1)) == "recursive_doubling");  // up_to_bytes is inclusive
  CHECK(name(t.choose(4097, 2, 1)) == "rabenseifner");
  CHECK(name(t.choose(std::size_t{1} << 30, 2, 1)) == "shm");  // the last choice has no bound
  CHECK(name(t.choose(65536, 4, 2)) == "mpi");
  CHECK(name(t.choose(65537, 4, 2)) == "shm+rabenseifner");
}

TEST_CASE("a shape without a case takes the nearest case of its kind, else the built-in rule", "[cpu][dist]") {
  CollectiveTable t = CollectiveTable::parse(kTable, "t.json");
  CHECK(t.find(8, 1) == &t.cases()[0]);  // one host: the one-host case, however far
  CHECK(t.find(16, 4) == &t.cases()[1]);
  CHECK(t.find(2, 2) == &t.cases()[1]);  // several hosts never take the one-host case
  CollectiveTable one_host = CollectiveTable::parse(with_choices(R"([{"algorithm": "ring"}])"), "o.json");
  CHECK(one_host.find(4, 2) == nullptr);
  // Built in: MPI below 256 KB across hosts, the hierarchical ring from there.
  CHECK(name(one_host.choose(1000, 4, 2)) == "mpi");
  CHECK(name(one_host.choose(std::size_t{256} << 10, 4, 2)) == "shm");
  CHECK(name(one_host.choose(1000, 4, 1)) == "ring");
}

TEST_CASE("the collective table survives writing and reading back, and put replaces a case", "[cpu][dist]") {
  CollectiveTable t = CollectiveTable::parse(kTable, "t.json");
  CollectiveTable back = CollectiveTable::parse(t.to_json(), "back.json");
  CHECK(back.to_json() == t.to_json());
  CHECK(back.fingerprint() == t.fingerprint());
  CHECK(back.cases()[0].measured == "one host");

  CollectiveTable::Case c{
      1, 2, "remeasured", {{std::nullopt, {AllReduceAlgorithm::Ring, AllReduceAlgorithm::Ring}}}, {}};
  back.put(c);
  CHECK(back.cases().size() == 2);
  CHECK(name(back.choose(4, 2, 1)) == "ring");
  CHECK(back.fingerprint() != t.fingerprint());
  back.put({1, 4, "", {{std::nullopt, {AllReduceAlgorithm::Mpi, AllReduceAlgorithm::Ring}}}, {}});
  CHECK(back.cases().size() == 3);
  CHECK(back.cases()[1].ranks == 4);  // kept in (hosts, ranks) order
}

TEST_CASE("the shipped collective table parses and covers one host and several", "[cpu][dist]") {
  const CollectiveTable& t = CollectiveTable::active();  // DTRAIN_COLLECTIVE_TABLE is not set under ctest
  CHECK(t.source() == "the shipped collective table");
  CHECK(t.find(2, 1) != nullptr);
  CHECK(t.find(4, 2) != nullptr);
}

TEST_CASE("a bad collective table is an error naming the file, the case and the field", "[cpu][dist]") {
  auto fails = [](const std::string& text, const std::string& message) {
    INFO(text);
    CHECK_THROWS_WITH(CollectiveTable::parse(text, "bad.json"), Contains(message));
  };
  fails("{", "bad.json: not JSON");
  fails(R"({"format": "other", "cases": []})", "bad.json: 'format' must be \"dtrain-allreduce-table/1\"");
  fails(R"({"format": "dtrain-allreduce-table/1"})", "bad.json: missing field 'cases'");
  fails(with_choices(R"([{"algorithm": "tree"}])"), "bad.json: cases[0].choices[0]: unknown algorithm 'tree'");
  fails(with_choices(R"([{"algorithm": "shm+shm"}])"), "cases[0].choices[0]: unknown algorithm 'shm+shm'");
  fails(with_choices(R"([{"algorithm": "auto"}])"), "unknown algorithm 'auto'");
  fails(with_choices(R"([])"), "cases[0]: 'choices' must be a non-empty array");
  fails(with_choices(R"([{"up_to_bytes": 10, "algorithm": "mpi"}])"),
        "cases[0].choices[0]: the last choice covers every larger message");
  fails(with_choices(R"([{"algorithm": "mpi"}, {"algorithm": "ring"}])"),
        "cases[0].choices[0]: only the last choice may leave out 'up_to_bytes'");
  fails(with_choices(R"([{"up_to_bytes": 10, "algorithm": "mpi"}, {"up_to_bytes": 10, "algorithm": "ring"},
                        {"algorithm": "shm"}])"),
        "cases[0].choices[1]: 'up_to_bytes' must grow");
  fails(with_choices(R"([{"up_to_bytes": -1, "algorithm": "mpi"}, {"algorithm": "shm"}])"),
        "'up_to_bytes' must be a byte count, got -1");
  fails(R"({"format": "dtrain-allreduce-table/1", "cases": [{"hosts": 3, "ranks": 2, "choices": []}]})",
        "cases[0]: 2 ranks cannot fill 3 hosts");
  fails(R"({"format": "dtrain-allreduce-table/1", "cases": [{"hosts": 0, "ranks": 2, "choices": []}]})",
        "cases[0]: 'hosts' must be an integer >= 1, got 0");
  const std::string twice = R"({"hosts": 1, "ranks": 2, "choices": [{"algorithm": "mpi"}]})";
  fails(R"({"format": "dtrain-allreduce-table/1", "cases": [)" + twice + "," + twice + "]}",
        "cases[1]: a second case for 2 ranks on 1 hosts");
  CHECK_THROWS_WITH(CollectiveTable::read("/nonexistent/table.json"),
                    Contains("/nonexistent/table.json: cannot open the collective table"));
}

TEST_CASE("the table's reduce_scatter, all_gather and broadcast lists choose by size, MPI without one", "[cpu][dist]") {
  using dist::CollectiveAlgorithm;
  using dist::TunedCollective;
  const std::string text = R"({"format": "dtrain-allreduce-table/1", "cases": [
    {"hosts": 1, "ranks": 2, "choices": [{"algorithm": "shm"}],
     "reduce_scatter": [{"up_to_bytes": 65536, "algorithm": "recursive_halving"}, {"algorithm": "ring"}],
     "broadcast": [{"up_to_bytes": 1024, "algorithm": "binomial_tree"}, {"algorithm": "chain"}]}]})";
  CollectiveTable t = CollectiveTable::parse(text, "t.json");
  CHECK(t.choose(TunedCollective::ReduceScatter, 65536, 2, 1) == CollectiveAlgorithm::RecursiveHalving);
  CHECK(t.choose(TunedCollective::ReduceScatter, 65537, 2, 1) == CollectiveAlgorithm::Ring);
  CHECK(t.choose(TunedCollective::Broadcast, 4, 4, 1) == CollectiveAlgorithm::BinomialTree);  // the nearest case
  CHECK(t.choose(TunedCollective::Broadcast, 2048, 2, 1) == CollectiveAlgorithm::Chain);
  CHECK(t.choose(TunedCollective::AllGather, 4, 2, 1) == CollectiveAlgorithm::Mpi);      // no list
  CHECK(t.choose(TunedCollective::ReduceScatter, 4, 4, 2) == CollectiveAlgorithm::Mpi);  // no case of its kind

  CollectiveTable back = CollectiveTable::parse(t.to_json(), "back.json");
  CHECK(back.to_json() == t.to_json());
  CHECK(back.cases()[0].steps(TunedCollective::Broadcast).size() == 2);
  CollectiveTable without = CollectiveTable::parse(kTable, "t.json");
  CHECK(without.fingerprint() != CollectiveTable::parse(R"({"format": "dtrain-allreduce-table/1", "cases": [
    {"hosts": 1, "ranks": 2, "measured": "one host",
     "choices": [{"up_to_bytes": 4096, "algorithm": "recursive_doubling"},
                 {"up_to_bytes": 1048576, "algorithm": "rabenseifner"}, {"algorithm": "shm"}],
     "all_gather": [{"algorithm": "ring"}]},
    {"hosts": 2, "ranks": 4,
     "choices": [{"up_to_bytes": 65536, "algorithm": "mpi"}, {"algorithm": "shm+rabenseifner"}]}]})",
                                                        "with.json")
                                     .fingerprint());  // ranks that differ only there still disagree

  auto fails = [](const std::string& list, const std::string& message) {
    const std::string bad = R"({"format": "dtrain-allreduce-table/1", "cases": [{"hosts": 1, "ranks": 2,
      "choices": [{"algorithm": "mpi"}], )" +
                            list + "}]}";
    INFO(bad);
    CHECK_THROWS_WITH(CollectiveTable::parse(bad, "bad.json"), Contains(message));
  };
  fails(R"("broadcast": [{"algorithm": "ring"}])",
        "bad.json: cases[0].broadcast[0]: unknown broadcast algorithm 'ring' (expected mpi, binomial_tree, chain, "
        "shm)");
  fails(R"("reduce_scatter": [{"algorithm": "shm+ring"}])",
        "cases[0].reduce_scatter[0]: unknown reduce_scatter algorithm 'shm+ring' (expected mpi, ring, "
        "recursive_halving, shm)");
  fails(R"("all_gather": [])", "cases[0]: 'all_gather' must be a non-empty array");
  fails(R"("all_gather": [{"up_to_bytes": 8, "algorithm": "ring"}])",
        "cases[0].all_gather[0]: the last choice covers every larger message");
  CHECK(CollectiveTable::parse(R"({"format": "dtrain-allreduce-table/1", "cases": [{"hosts": 1, "ranks": 2,
      "choices": [{"algorithm": "mpi"}], "all_gather": [{"algorithm": "shm"}]}]})",
                               "one_host.json")
            .choose(TunedCollective::AllGather, 8, 2, 1) == CollectiveAlgorithm::SharedMemory);
  CHECK(CollectiveTable::parse(R"({"format": "dtrain-allreduce-table/1", "cases": [{"hosts": 2, "ranks": 4,
      "choices": [{"algorithm": "mpi"}], "all_gather": [{"algorithm": "shm"}]}]})",
                               "two_hosts.json")
            .choose(TunedCollective::AllGather, 8, 4, 2) == CollectiveAlgorithm::SharedMemory);  // hierarchical
  CHECK(CollectiveTable::parse(R"({"format": "dtrain-allreduce-table/1", "cases": [{"hosts": 2, "ranks": 4,
      "choices": [{"algorithm": "mpi"}], "reduce_scatter": [{"algorithm": "shm"}]}]})",
                               "two_hosts.json")
            .choose(TunedCollective::ReduceScatter, 8, 4, 2) == CollectiveAlgorithm::SharedMemory);  // hierarchical
}
