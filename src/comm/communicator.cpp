// The backend-independent parts of the communicator API: algorithm names, the choice
// between MPI and the local group, ending the job, and the programs' error handling.
#include "dtrain/comm/communicator.h"

#include "comm/communicator_options.h"
#include "comm/local_communicator.h"
#include "comm/mpi_entry.h"
#include "dtrain/core/environment.h"
#include "dtrain/core/error.h"

#include <fmt/format.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <cstdio>
#include <exception>

namespace dtrain::dist {
namespace {
constexpr AllReduceAlgorithm kAlgorithms[] = {AllReduceAlgorithm::Auto,
                                              AllReduceAlgorithm::Mpi,
                                              AllReduceAlgorithm::Ring,
                                              AllReduceAlgorithm::SharedMemory,
                                              AllReduceAlgorithm::RecursiveDoubling,
                                              AllReduceAlgorithm::Rabenseifner};
constexpr CollectiveAlgorithm kCollectiveAlgorithms[] = {CollectiveAlgorithm::Auto,
                                                         CollectiveAlgorithm::Mpi,
                                                         CollectiveAlgorithm::Ring,
                                                         CollectiveAlgorithm::RecursiveHalving,
                                                         CollectiveAlgorithm::RecursiveDoubling,
                                                         CollectiveAlgorithm::BinomialTree,
                                                         CollectiveAlgorithm::Chain,
                                                         CollectiveAlgorithm::SharedMemory};

// Variables that Open MPI's mpirun, MPICH/Hydra and Slurm (with PMI or PMIx) set in every
// rank they start.
bool launched_by_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK"}) {
    if (env::get(name)) return true;
  }
  return false;
}

}  // namespace

namespace {
std::atomic<bool> lost_peer{false};
std::mutex departure_mutex;
std::function<std::string()> departure_check;

// Into DTRAIN_STATUS_FILE, for dtrain-launch: rank 0's exit code, or a failure on any rank.
void write_status(int code) {
  const auto path = env::get("DTRAIN_STATUS_FILE");
  if (!path || (code == 0 && detail::mpi_world_rank() > 0)) return;
  if (std::FILE* f = std::fopen(path->c_str(), "w")) {
    std::fprintf(f, "%d\n", code);
    std::fclose(f);
  }
}

// Ends this process with `code`, leaving MPI_Finalize out when a peer was lost (it would
// wait for that peer for ever).
[[noreturn]] void exit_without_finalize(int code) {
  std::fflush(nullptr);
  std::_Exit(code);
}
}  // namespace

void detail::note_peer_lost() { lost_peer.store(true); }

bool peer_was_lost() { return lost_peer.load(); }

void set_departure_check(std::function<std::string()> check) {
  std::lock_guard lock(departure_mutex);
  departure_check = std::move(check);
}

CommunicatorOptions detail::with_environment(CommunicatorOptions options) {
  if (auto seconds = env::get_int("DTRAIN_TIMEOUT")) {
    DTRAIN_CHECK(*seconds > 0 && *seconds <= 10'000'000, "DTRAIN_TIMEOUT={}: expected seconds in [1, 10000000]",
                 *seconds);
    options.timeout = std::chrono::seconds(*seconds);
  }
  if (auto check = env::get_int("DTRAIN_CHECK_COLLECTIVES")) {
    DTRAIN_CHECK(*check == 0 || *check == 1, "DTRAIN_CHECK_COLLECTIVES={}: expected 0 or 1", *check);
    options.check_collectives = *check == 1;
  }
  if (auto host = env::get_int("DTRAIN_HOST_ID")) {
    DTRAIN_CHECK(*host >= 0 && *host <= INT_MAX, "DTRAIN_HOST_ID={}: expected a host number >= 0", *host);
    options.host_id = static_cast<int>(*host);
  }
  return options;
}

CollectiveAlgorithm detail::forced_algorithm(const CommunicatorOptions& options, TunedCollective which) {
  switch (which) {
    case TunedCollective::ReduceScatter: return options.reduce_scatter;
    case TunedCollective::AllGather: return options.all_gather;
    case TunedCollective::Broadcast: return options.broadcast;
  }
  return CollectiveAlgorithm::Auto;
}

void detail::check_collective_algorithms(const CommunicatorOptions& options) {
  for (TunedCollective which : kTunedCollectives) {
    const CollectiveAlgorithm a = forced_algorithm(options, which);
    DTRAIN_CHECK(a == CollectiveAlgorithm::Auto || runs(which, a),
                 "CommunicatorOptions::{}: {} is not an algorithm of {}", collective_name(which),
                 collective_algorithm_name(a), collective_name(which));
  }
}

bool detail::uses_table(const CommunicatorOptions& options) {
  return options.all_reduce == AllReduceAlgorithm::Auto || options.reduce_scatter == CollectiveAlgorithm::Auto ||
         options.all_gather == CollectiveAlgorithm::Auto || options.broadcast == CollectiveAlgorithm::Auto;
}

const char* algorithm_name(AllReduceAlgorithm a) {
  switch (a) {
    case AllReduceAlgorithm::Auto: return "auto";
    case AllReduceAlgorithm::Mpi: return "mpi";
    case AllReduceAlgorithm::Ring: return "ring";
    case AllReduceAlgorithm::SharedMemory: return "shm";
    case AllReduceAlgorithm::RecursiveDoubling: return "recursive_doubling";
    case AllReduceAlgorithm::Rabenseifner: return "rabenseifner";
  }
  return "?";
}

AllReduceAlgorithm parse_algorithm(const std::string& name) {
  for (AllReduceAlgorithm a : kAlgorithms) {
    if (name == algorithm_name(a)) return a;
  }
  DTRAIN_FAIL("unknown all-reduce algorithm '{}' (expected auto, mpi, ring, shm, recursive_doubling or rabenseifner)",
              name);
}

const char* collective_algorithm_name(CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::Auto: return "auto";
    case CollectiveAlgorithm::Mpi: return "mpi";
    case CollectiveAlgorithm::Ring: return "ring";
    case CollectiveAlgorithm::RecursiveHalving: return "recursive_halving";
    case CollectiveAlgorithm::RecursiveDoubling: return "recursive_doubling";
    case CollectiveAlgorithm::BinomialTree: return "binomial_tree";
    case CollectiveAlgorithm::Chain: return "chain";
    case CollectiveAlgorithm::SharedMemory: return "shm";
  }
  return "?";
}

CollectiveAlgorithm parse_collective_algorithm(const std::string& name) {
  for (CollectiveAlgorithm a : kCollectiveAlgorithms) {
    if (name == collective_algorithm_name(a)) return a;
  }
  DTRAIN_FAIL(
      "unknown collective algorithm '{}' (expected auto, mpi, ring, recursive_halving, recursive_doubling, "
      "binomial_tree, chain or shm)",
      name);
}

CommunicatorPtr world(const CommunicatorOptions& options) {
  detail::check_collective_algorithms(options);  // before any MPI call: every rank fails alike, nothing waits
  CommunicatorOptions resolved = detail::with_environment(options);
  if (launched_by_mpi_launcher() || detail::mpi_running()) return detail::mpi_world(resolved);
  return std::make_shared<LocalCommunicator>();
}

CommunicatorPtr single_process_communicator() { return std::make_shared<LocalCommunicator>(); }

int host_rank() { return detail::mpi_host_rank(); }

void abort_job(const std::string& message) {
  int rank = detail::mpi_world_rank();
  std::function<std::string()> check;
  {
    std::lock_guard lock(departure_mutex);
    check = departure_check;
  }
  if (const std::string departure = check ? check() : std::string(); !departure.empty()) {
    std::fprintf(stderr, "dtrain: rank %d: %s\n", rank < 0 ? 0 : rank, departure.c_str());
    exit_without_finalize(0);
  }
  write_status(1);
  std::fprintf(stderr, "dtrain: rank %d: %s\n", rank < 0 ? 0 : rank, message.c_str());
  std::fflush(stderr);
  detail::abort_mpi_job(1);
}

int run_program(const char* program, const std::function<int(const CommunicatorPtr&)>& body,
                const CommunicatorOptions& options) {
  CommunicatorPtr comm;
  std::string error;
  try {
    comm = world(options);
    const int code = body(comm);
    write_status(code);
    if (peer_was_lost()) exit_without_finalize(code);
    return code;
  } catch (const Error& e) {
    error = e.message();
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (comm && comm->size() > 1) abort_job(fmt::format("{}: error: {}", program, error));
  fmt::print(stderr, "{}: error: {}\n", program, error);
  write_status(1);
  return 1;
}

namespace {

class Then final : public Work {
 public:
  Then(WorkPtr work, std::function<void()> next) : work_(std::move(work)), next_(std::move(next)) {}
  void wait() override {
    work_->wait();  // rethrows its failure on every call
    if (!next_) return;
    const std::function<void()> next = std::move(next_);
    next_ = nullptr;  // run once, even if it throws; what it holds goes with it
    next();
  }

 private:
  WorkPtr work_;
  std::function<void()> next_;
};

class WhenAll final : public Work {
 public:
  explicit WhenAll(std::vector<WorkPtr> works) : works_(std::move(works)) {}
  void wait() override {
    for (const WorkPtr& w : works_) w->wait();
  }

 private:
  std::vector<WorkPtr> works_;
};

}  // namespace

WorkPtr then(WorkPtr work, std::function<void()> next) {
  DTRAIN_CHECK(work != nullptr && next != nullptr, "then: a work and a continuation are needed");
  return std::make_shared<Then>(std::move(work), std::move(next));
}

WorkPtr when_all(std::vector<WorkPtr> works) { return std::make_shared<WhenAll>(std::move(works)); }

}  // namespace dtrain::dist
