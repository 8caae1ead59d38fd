#include "comm/mpi/transport/mpi_communicator.h"

#include "comm/collective_checks.h"
#include "comm/communicator_options.h"
#include "comm/mpi/algorithms/algorithm_choice.h"
#include "comm/mpi/transport/host_groups.h"
#include "comm/mpi/transport/request_wait.h"
#include "comm/mpi_entry.h"
#include "comm/reduce_kernels.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <numeric>
#include <vector>

namespace dtrain::dist::mpi {
namespace {
// MPI counts are ints; the ring and shared-memory all-reduce take any size.
int mpi_count(std::int64_t n, const char* op) {
  DTRAIN_CHECK(n <= INT_MAX, "{}: {} elements exceed MPI's int count", op, n);
  return static_cast<int>(n);
}

void check_host_tensor(const Tensor& t, const char* op, const char* what = "tensor") {
  check_buffer(t, op, what);
  check_cpu(t, op, what);
}

std::string describe_ranks(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return fmt::format("rank {}", ranks[0]);
  constexpr std::size_t kShown = 8;
  if (ranks.size() <= kShown) return fmt::format("ranks {}", fmt::join(ranks, ", "));
  return fmt::format("ranks {}, ... ({} ranks)", fmt::join(ranks.begin(), ranks.begin() + kShown, ", "), ranks.size());
}

// Each rank of `group` as a rank of MPI_COMM_WORLD.
std::vector<int> world_ranks_of(MPI_Comm comm) {
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int n = 0;
  MPI_Group_size(group, &n);
  std::vector<int> ranks(static_cast<std::size_t>(n)), out(static_cast<std::size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  MPI_Group_translate_ranks(group, n, ranks.data(), world, out.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}
// Ranks that choose different algorithms for one message deadlock: ranks given different
// algorithms in their options, or (where the table chooses) ranks that read different
// tables. Compared when the communicator is made, in one MPI_Allreduce that every rank
// makes whatever its options.
void check_same_choices(MPI_Comm comm, const std::string& name, const CommunicatorOptions& o) {
  const std::uint64_t table = detail::uses_table(o) ? CollectiveTable::active().fingerprint() : 0;
  const std::uint64_t forced =
      static_cast<std::uint64_t>(o.all_reduce) | static_cast<std::uint64_t>(o.leaders_all_reduce) << 8 |
      static_cast<std::uint64_t>(o.reduce_scatter) << 16 | static_cast<std::uint64_t>(o.all_gather) << 24 |
      static_cast<std::uint64_t>(o.broadcast) << 32;
  std::uint64_t seen[4] = {forced, ~forced, table, ~table}, most[4] = {0, 0, 0, 0};
  check(MPI_Allreduce(seen, most, 4, MPI_UINT64_T, MPI_MAX, comm), "MPI_Allreduce");
  DTRAIN_CHECK(most[0] == forced && most[1] == ~forced,
               "communicator '{}': the ranks were given different collective algorithms (CommunicatorOptions::"
               "all_reduce, leaders_all_reduce, reduce_scatter, all_gather and broadcast must be alike on every rank)",
               name);
  DTRAIN_CHECK(most[2] == table && most[3] == ~table,
               "communicator '{}': the ranks read different collective tables (this rank's is {}); set "
               "DTRAIN_COLLECTIVE_TABLE alike on every rank",
               name, CollectiveTable::active().source());
}
}  // namespace

MpiCommunicator::State::~State() {
  (void)flat.release();
  (void)shm.release();
  (void)shm_collectives.release();
}

ShmCollectives& MpiCommunicator::State::shared_memory() {
  if (!shm_collectives) shm_collectives = std::make_unique<ShmCollectives>(comm, host, kShmChunkBytes);
  return *shm_collectives;
}

P2pCollectives& MpiCommunicator::State::p2p_collectives() {
  if (!collectives) {
    check(MPI_Comm_dup(comm, &collectives_comm), "MPI_Comm_dup");
    check(MPI_Comm_set_errhandler(collectives_comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    collectives = std::make_unique<P2pCollectives>(collectives_comm);
  }
  return *collectives;
}

int MpiCommunicator::host_rank() const {
  int r = 0;
  MPI_Comm_rank(state_->host, &r);
  return r;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, const CommunicatorOptions& options, std::string name)
    : state_(std::make_unique<State>()), options_(options), name_(std::move(name)) {
  State& state = *state_;
  state.comm = comm;
  check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  state.size = size_;
  if (options_.check_collectives) state.checker = std::make_unique<CollectiveChecker>(name_, size_);
  world_ranks_ = world_ranks_of(comm);
  state.host = split_hosts(comm, options_.host_id);
  std::vector<int> host_world = world_ranks_of(state.host);
  single_host_ = host_world.size() == static_cast<std::size_t>(size_);
  int leader = host_world.front() == world_ranks_[static_cast<std::size_t>(rank_)] ? 1 : 0;
  check(MPI_Allreduce(&leader, &hosts_, 1, MPI_INT, MPI_SUM, comm), "MPI_Allreduce");
  // The fewest and the most ranks on one host (negated for the fewest: one MPI_MAX).
  int host_sizes[2] = {-static_cast<int>(host_world.size()), static_cast<int>(host_world.size())};
  check(MPI_Allreduce(MPI_IN_PLACE, host_sizes, 2, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
  even_hosts_ = -host_sizes[0] == host_sizes[1];
  check_same_choices(comm, name_, options_);
  DTRAIN_CHECK(even_hosts_ || options_.reduce_scatter != CollectiveAlgorithm::SharedMemory,
               "communicator '{}': CommunicatorOptions::reduce_scatter = shm needs the same number of ranks on every "
               "host, and its {} hosts hold {} to {} ranks",
               name_, hosts_, -host_sizes[0], host_sizes[1]);
  std::erase(host_world, world_ranks_[static_cast<std::size_t>(rank_)]);
  host_peers_ = host_world.empty() ? "no rank" : describe_ranks(host_world) + " on this host";
  int* tag_ub = nullptr;
  int found = 0;
  check(MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &found), "MPI_Comm_get_attr(MPI_TAG_UB)");
  if (found) tag_ub_ = *tag_ub;
  // A timeout in one part fails the other (Throw), before the stalled operation's waiter
  // learns of it. Under AbortJob the CommThread ends the job itself. Both parts live until
  // shutdown() has stopped them, so each may call the other; the thread reaches the engine
  // through link_, which abandon() disarms before it may leave the thread running.
  const bool abort = options_.on_timeout == OnTimeout::AbortJob;
  thread_ = std::make_unique<CommThread>(
      options_.timeout,
      abort ? CommThread::TimeoutHandler()
            : [link = link_](const std::string& report) {
                std::lock_guard lock(link->mutex);
                if (link->p2p != nullptr) link->p2p->fail(report);
              },
      options_.on_timeout);
  p2p_ = std::make_unique<P2pEngine>(
      comm, options_.timeout, [this](int r) { return peer(r); },
      [this, abort](const std::string& report) {
        if (abort) abort_job(report + "; aborting the job");
        else thread_->fail(report);
      });
  link_->p2p = p2p_.get();  // no timeout can fire yet: nothing was submitted
  track(this);
}

MpiCommunicator::~MpiCommunicator() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    spdlog::error("dist: closing an MPI communicator failed: {}", e.what());
  }
}

void MpiCommunicator::shutdown() {
  if (!thread_) return;
  untrack(this);
  p2p_->close();  // waits for the messages in flight; a timeout there fails the thread too
  // Freeing waits for the other ranks (MPI_Win_free): a lost one never comes.
  if (thread_->failed() || lost_peer_) {
    abandon();
    return;
  }
  // Under the watchdog like any operation: MPI_Win_free synchronizes the host's ranks.
  try {
    thread_->run({"shutdown", 0, "all ranks"}, [state = state_.get()] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (finalized) return;  // the application finalized MPI first: its objects are gone
      state->shm.reset();
      state->shm_collectives.reset();
      state->flat.reset();
      state->collectives.reset();
      if (state->collectives_comm != MPI_COMM_NULL) MPI_Comm_free(&state->collectives_comm);
      MPI_Comm_free(&state->host);
      MPI_Comm_free(&state->comm);
    });
  } catch (const Error&) {
    abandon();  // it timed out under OnTimeout::Throw
    throw;
  }
  thread_.reset();  // later calls find no thread
  p2p_.reset();
}

// Freeing MPI objects is collective (MPI_Win_free waits for the host's ranks), and after a
// failure the peers may be gone: they are left to MPI_Finalize (~State frees none). A
// collective still stalled keeps its thread and the State it uses, both leaked.
void MpiCommunicator::abandon() {
  {
    // The thread's watchdog stays armed while a collective runs; from now on its report
    // reaches nobody (the engine is failed already, and goes next).
    std::lock_guard lock(link_->mutex);
    link_->p2p = nullptr;
  }
  if (thread_->wait_idle(options_.timeout)) {
    thread_.reset();  // nothing runs, and a failed thread starts nothing more
  } else {
    spdlog::error("dist: a failed communicator's collective is still stalled; its thread is left to it");
    (void)thread_.release();  // blocked in MPI: it must outlive the communicator
    (void)state_.release();   // and so must what it uses
  }
  p2p_.reset();
}

CommThread& MpiCommunicator::thread(const char* op) {
  DTRAIN_CHECK(thread_ != nullptr, "{}: the communicator is shut down (MPI was finalized)", op);
  return *thread_;
}

std::string MpiCommunicator::peer(int rank) const {
  return fmt::format("rank {}", world_ranks_[static_cast<std::size_t>(rank)]);
}

std::string MpiCommunicator::waiting_for(AllReduceAlgorithm algorithm) const {
  switch (algorithm) {
    case AllReduceAlgorithm::Ring: return peer((rank_ - 1 + size_) % size_);  // receives from the left
    case AllReduceAlgorithm::SharedMemory: return single_host_ ? host_peers_ : "all ranks";
    default: return "all ranks";  // recursive doubling and Rabenseifner: another partner every step
  }
}

std::string MpiCommunicator::waiting_for(CollectiveAlgorithm algorithm) const {
  switch (algorithm) {
    case CollectiveAlgorithm::Ring: return peer((rank_ - 1 + size_) % size_);  // receives from the left
    case CollectiveAlgorithm::SharedMemory: return single_host_ ? host_peers_ : "all ranks";
    default: return "all ranks";
  }
}

CollectiveAlgorithm MpiCommunicator::algorithm_for(TunedCollective which, std::size_t bytes) const {
  const CollectiveAlgorithm forced = detail::forced_algorithm(options_, which);
  if (forced != CollectiveAlgorithm::Auto) return forced;
  const CollectiveAlgorithm chosen = CollectiveTable::active().choose(which, bytes, size_, hosts_);
  // Reduce-scatter's shm across hosts needs hosts of equal size; where they are not, the ring
  // (which every shape runs) takes its place, as it does with one rank per host, where shm
  // would only copy the input into its region before the same ring (a table case of
  // several ranks per host can be the nearest to such a shape).
  if (which == TunedCollective::ReduceScatter && chosen == CollectiveAlgorithm::SharedMemory &&
      (!even_hosts_ || (hosts_ > 1 && hosts_ == size_)))
    return CollectiveAlgorithm::Ring;
  return chosen;
}

// ---- all-reduce ---------------------------------------------------------------

WorkPtr MpiCommunicator::all_reduce_async(Tensor& t, ReduceOp op) {
  auto [info, body] = prepare_all_reduce(t, op);
  return thread("all_reduce").submit(std::move(info), std::move(body));
}

void MpiCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  auto [info, body] = prepare_all_reduce(t, op);
  thread("all_reduce").run(std::move(info), std::move(body));
}

std::pair<OpInfo, std::function<void()>> MpiCommunicator::prepare_all_reduce(const Tensor& t, ReduceOp op) {
  check_host_tensor(t, "all_reduce");
  check_reduction(t, op, "all_reduce");
  AllReduceChoice choice{options_.all_reduce, options_.leaders_all_reduce == AllReduceAlgorithm::Auto
                                                  ? AllReduceAlgorithm::Ring
                                                  : options_.leaders_all_reduce};
  if (choice.algorithm == AllReduceAlgorithm::Auto) choice = choose_all_reduce(t.nbytes(), size_, hosts_);
  if (choice.algorithm == AllReduceAlgorithm::Mpi) mpi_count(t.numel(), "all_reduce");
  return {OpInfo{"all_reduce", t.nbytes(), waiting_for(choice.algorithm)},
          checked([state = state_.get(), t = HostBytes(t), op, choice] { all_reduce_now(*state, t, op, choice); },
                  CollectiveOp::AllReduce, &t, -1, static_cast<int>(op))};
}

std::function<void()> MpiCommunicator::checked(std::function<void()> body, CollectiveOp op, const Tensor* t, int root,
                                               int reduce) const {
  if (!options_.check_collectives) return body;
  return [state = state_.get(), call = CollectiveRecord::call(op, t, root, reduce), body = std::move(body)] {
    state->checker->check(call, [state](const std::int64_t* mine, std::int64_t* all) {
      constexpr int kWords = static_cast<int>(kRecordWords);
      check(MPI_Allgather(mine, kWords, MPI_INT64_T, all, kWords, MPI_INT64_T, state->comm), "MPI_Allgather");
    });
    body();
  };
}

// The objects behind the algorithms are made on first use, on the comm thread; their
// constructors are collective, which holds because every rank chooses alike (the same
// table, checked when the communicator was made, and the same message sizes).
void MpiCommunicator::all_reduce_now(State& state, const HostBytes& t, ReduceOp op, AllReduceChoice choice) {
  void* data = t.raw_data();
  const auto count = static_cast<std::size_t>(t.numel());
  if (choice.algorithm == AllReduceAlgorithm::SharedMemory) {
    if (!state.shm) state.shm = std::make_unique<ShmAllReduce>(state.comm, state.host, kShmChunkBytes);
    state.shm->run(data, count, t.dtype(), op, choice.leaders);  // averages by itself
    return;
  }
  if (choice.algorithm == AllReduceAlgorithm::Mpi) {
    // Straight on the communicator: no object to make (nor to leave to MPI_Finalize when a
    // failed communicator is abandoned).
    mpi_all_reduce(state.comm, data, count, t.dtype(), op);
  } else {
    if (!state.flat) state.flat = std::make_unique<FlatAllReduce>(state.comm);
    state.flat->run(choice.algorithm, data, count, t.dtype(), op);
  }
  if (op == ReduceOp::Mean) divide(data, count, t.dtype(), state.size);
}

// ---- the other collectives ----------------------------------------------------
// Blocking operations run on the calling thread when the communicator is idle (run()).
// The table chooses between MPI's blocking collectives (which poll inside the library
// while they wait) and P2pCollectives' algorithms (which back off), as for all_reduce.

void MpiCommunicator::broadcast(Tensor& t, int root) {
  check_host_tensor(t, "broadcast");
  check_rank(root, size_, "broadcast", "root");
  const CollectiveAlgorithm algorithm = algorithm_for(TunedCollective::Broadcast, t.nbytes());
  std::function<void()> body;
  if (algorithm == CollectiveAlgorithm::Mpi) {
    body = [comm = state_->comm, t = HostBytes(t), root, count = mpi_count(t.numel(), "broadcast")] {
      check(MPI_Bcast(t.raw_data(), count, datatype(t.dtype()), root, comm), "MPI_Bcast");
    };
  } else if (algorithm == CollectiveAlgorithm::SharedMemory) {
    body = [state = state_.get(), t = HostBytes(t), root] {
      state->shared_memory().broadcast(t.raw_data(), t.nbytes(), root);
    };
  } else {
    body = [state = state_.get(), t = HostBytes(t), root, algorithm] {
      state->p2p_collectives().broadcast(algorithm, t.raw_data(), t.nbytes(), root);
    };
  }
  thread("broadcast")
      .run({"broadcast", t.nbytes(), root == rank_ ? std::string("all ranks") : peer(root)},
           checked(std::move(body), CollectiveOp::Broadcast, &t, root));
}

WorkPtr MpiCommunicator::all_gather_async(const Tensor& in, Tensor& out) {
  auto [info, body] = prepare_all_gather(in, out);
  return thread("all_gather").submit(std::move(info), std::move(body));
}

void MpiCommunicator::all_gather(const Tensor& in, Tensor& out) {
  auto [info, body] = prepare_all_gather(in, out);
  thread("all_gather").run(std::move(info), std::move(body));
}

std::pair<OpInfo, std::function<void()>> MpiCommunicator::prepare_all_gather(const Tensor& in, const Tensor& out) {
  check_host_tensor(in, "all_gather", "in");
  check_host_tensor(out, "all_gather", "out");
  check_gather_shapes(in, out, size_, "all_gather");
  const bool in_place = gather_in_place(in, out, rank_, "all_gather");  // MPI forbids any other overlap
  const CollectiveAlgorithm algorithm = algorithm_for(TunedCollective::AllGather, out.nbytes());
  std::function<void()> body;
  if (algorithm == CollectiveAlgorithm::Mpi) {
    int count = mpi_count(in.numel(), "all_gather");
    mpi_count(out.numel(), "all_gather");
    body = [comm = state_->comm, in = HostBytes(in), out = HostBytes(out), count, in_place] {
      MPI_Datatype type = datatype(in.dtype());
      check(in_place ? MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out.raw_data(), count, type, comm)
                     : MPI_Allgather(in.raw_data(), count, type, out.raw_data(), count, type, comm),
            "MPI_Allgather");
    };
  } else if (algorithm == CollectiveAlgorithm::SharedMemory) {
    body = [state = state_.get(), in = HostBytes(in), out = HostBytes(out)] {
      state->shared_memory().all_gather(in.raw_data(), out.raw_data(), in.nbytes());
    };
  } else {
    body = [state = state_.get(), in = HostBytes(in), out = HostBytes(out), algorithm] {
      state->p2p_collectives().all_gather(algorithm, in.raw_data(), out.raw_data(),
                                          static_cast<std::size_t>(in.numel()), in.dtype());
    };
  }
  return {OpInfo{"all_gather", out.nbytes(), waiting_for(algorithm)},
          checked(std::move(body), CollectiveOp::AllGather, &in)};
}

WorkPtr MpiCommunicator::reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) {
  auto [info, body] = prepare_reduce_scatter(in, out, op);
  return thread("reduce_scatter").submit(std::move(info), std::move(body));
}

void MpiCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  auto [info, body] = prepare_reduce_scatter(in, out, op);
  thread("reduce_scatter").run(std::move(info), std::move(body));
}

std::pair<OpInfo, std::function<void()>> MpiCommunicator::prepare_reduce_scatter(const Tensor& in, const Tensor& out,
                                                                                 ReduceOp op) {
  check_host_tensor(in, "reduce_scatter", "in");
  check_host_tensor(out, "reduce_scatter", "out");
  check_scatter_shapes(in, out, size_, "reduce_scatter");
  check_reduction(in, op, "reduce_scatter");
  const CollectiveAlgorithm algorithm = algorithm_for(TunedCollective::ReduceScatter, in.nbytes());
  if (algorithm == CollectiveAlgorithm::Mpi) {
    mpi_count(out.numel(), "reduce_scatter");
    mpi_count(in.numel(), "reduce_scatter");
  }
  auto body = [state = state_.get(), in = HostBytes(in), out = HostBytes(out), op, algorithm] {
    const auto count = static_cast<std::size_t>(out.numel());
    if (algorithm == CollectiveAlgorithm::Mpi) {
      check(MPI_Reduce_scatter_block(in.raw_data(), out.raw_data(), static_cast<int>(count), datatype(in.dtype()),
                                     reduce_op(op, in.dtype()), state->comm),
            "MPI_Reduce_scatter_block");
    } else if (algorithm == CollectiveAlgorithm::SharedMemory) {
      state->shared_memory().reduce_scatter(in.raw_data(), out.raw_data(), count, in.dtype(), op);
    } else {
      state->p2p_collectives().reduce_scatter(algorithm, in.raw_data(), out.raw_data(), count, in.dtype(), op);
    }
    if (op == ReduceOp::Mean) divide(out.raw_data(), count, out.dtype(), state->size);
  };
  return {OpInfo{"reduce_scatter", in.nbytes(), waiting_for(algorithm)},
          checked(std::move(body), CollectiveOp::ReduceScatter, &in, -1, static_cast<int>(op))};
}

// ---- point to point -------------------------------------------------------------
// Through the P2pEngine, never queued behind the collectives (see p2p_engine.h).

P2pEngine& MpiCommunicator::p2p(const char* op) {
  DTRAIN_CHECK(p2p_ != nullptr, "{}: the communicator is shut down (MPI was finalized)", op);
  return *p2p_;
}

P2pEngine::Message MpiCommunicator::message(const char* op, P2POp::Kind kind, const Tensor& t, int peer, int tag,
                                            bool in_batch) const {
  const bool receive = kind == P2POp::Kind::Recv;
  check_host_tensor(t, op);
  check_peer(peer, rank_, size_, op, receive ? "src" : "dst",
             {.self_allowed = in_batch, .any_allowed = receive && !in_batch});
  check_tag(tag, op, receive && !in_batch);
  DTRAIN_CHECK(tag <= tag_ub_, "{}: tag {} exceeds MPI's largest tag, {}", op, tag, tag_ub_);
  mpi_count(t.numel(), op);
  return {op, kind, t, peer, tag};
}

WorkPtr MpiCommunicator::isend(const Tensor& t, int dst, int tag) {
  return p2p("isend").post({message("isend", P2POp::Kind::Send, t, dst, tag, false)}).front();
}

RecvWorkPtr MpiCommunicator::irecv(Tensor& t, int src, int tag) {
  return p2p("irecv").post({message("irecv", P2POp::Kind::Recv, t, src, tag, false)}).front();
}

std::vector<WorkPtr> MpiCommunicator::batch_isend_irecv(const std::vector<P2POp>& ops) {
  std::vector<P2pEngine::Message> messages;
  messages.reserve(ops.size());
  for (const P2POp& op : ops) {
    messages.push_back(message("batch_isend_irecv", op.kind, op.tensor, op.peer, op.tag, true));
  }
  std::vector<RecvWorkPtr> works = p2p("batch_isend_irecv").post(messages);
  return {works.begin(), works.end()};
}

std::size_t MpiCommunicator::wait_any(const std::vector<WorkPtr>& works) {
  return p2p("wait_any").wait_any(works, std::chrono::milliseconds::max());
}

std::size_t MpiCommunicator::wait_any_for(const std::vector<WorkPtr>& works, std::chrono::milliseconds limit) {
  return p2p("wait_any_for").wait_any(works, limit);
}

void MpiCommunicator::forget_peer(int rank) {
  DTRAIN_CHECK(rank >= 0 && rank < size_ && rank != rank_, "forget_peer: {} is not another rank of {} ranks", rank,
               size_);
  p2p("forget_peer").forget(rank);
  lost_peer_ = true;
  detail::note_peer_lost();
}

// Made on the calling thread: the collectives' thread would run it after whatever it has
// queued, and nothing here is queued behind (the members meet only in this call).
std::shared_ptr<Communicator> MpiCommunicator::subgroup(const std::vector<int>& ranks) {
  DTRAIN_CHECK(std::is_sorted(ranks.begin(), ranks.end()) &&
                   std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end() &&
                   std::binary_search(ranks.begin(), ranks.end(), rank_) && ranks.front() >= 0 && ranks.back() < size_,
               "subgroup: the ranks must be ascending ranks of {} ranks, this rank ({}) among them", size_, rank_);
  MPI_Group all, some;
  check(MPI_Comm_group(state_->comm, &all), "MPI_Comm_group");
  check(MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &some), "MPI_Group_incl");
  MPI_Comm comm;
  const int rc = MPI_Comm_create_group(state_->comm, some, 0, &comm);
  MPI_Group_free(&some);
  MPI_Group_free(&all);
  check(rc, "MPI_Comm_create_group");
  return std::make_shared<MpiCommunicator>(comm, options_, fmt::format("{}.subgroup({})", name_, ranks.size()));
}

void MpiCommunicator::send(const Tensor& t, int dst, int tag) {
  p2p("send").post({message("send", P2POp::Kind::Send, t, dst, tag, false)}).front()->wait();
}

void MpiCommunicator::recv(Tensor& t, int src, int tag) {
  p2p("recv").post({message("recv", P2POp::Kind::Recv, t, src, tag, false)}).front()->wait();
}

// ---- synchronization --------------------------------------------------------------

void MpiCommunicator::barrier() {
  auto body = [comm = state_->comm] {
    MPI_Request request;
    check(MPI_Ibarrier(comm, &request), "MPI_Ibarrier");
    wait_all(&request, 1, "MPI_Ibarrier");
  };
  thread("barrier").run({"barrier", 0, "all ranks"}, checked(body, CollectiveOp::Barrier));
}

std::shared_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  DTRAIN_CHECK(color >= 0, "split: color must be >= 0, got {}", color);
  // The body owns what it writes: under OnTimeout::Throw this call may return (throwing)
  // while the body still runs. Colors and keys differ between ranks by design: a check
  // compares only the call.
  auto child = std::make_shared<std::shared_ptr<Communicator>>();
  auto body = [comm = state_->comm, options = options_, name = fmt::format("{}.split({})", name_, color), color, key,
               child] {
    MPI_Comm split;
    check(MPI_Comm_split(comm, color, key, &split), "MPI_Comm_split");
    *child = std::make_shared<MpiCommunicator>(split, options, name);
  };
  thread("split").run({"split", 0, "all ranks"}, checked(body, CollectiveOp::Split));
  return *child;
}

}  // namespace dtrain::dist::mpi
