#include "dist/mpi/mpi_communicator.h"

#include "dist/backoff.h"
#include "dist/collective_checks.h"
#include "dist/mpi/algorithm_choice.h"
#include "dist/mpi/request_wait.h"
#include "dist/reduce_kernels.h"

#include <spdlog/spdlog.h>

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
}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, const CommunicatorOptions& options) : comm_(comm), options_(options) {
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  world_ranks_ = world_ranks_of(comm_);
  check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host_), "MPI_Comm_split_type");
  std::vector<int> host_world = world_ranks_of(host_);
  single_host_ = host_world.size() == static_cast<std::size_t>(size_);
  std::erase(host_world, world_ranks_[static_cast<std::size_t>(rank_)]);
  host_peers_ = host_world.empty() ? "no rank" : describe_ranks(host_world) + " on this host";
  thread_ = std::make_unique<CommThread>(options_.timeout);
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
  std::unique_ptr<CommThread> thread = std::move(thread_);  // later calls find no thread
  // Under the watchdog like any operation: MPI_Win_free synchronizes the host's ranks.
  thread->run({"shutdown", 0, "all ranks"}, [this] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;  // the application finalized MPI first: its objects are gone
    shm_.reset();
    ring_.reset();
    MPI_Comm_free(&host_);
    MPI_Comm_free(&comm_);
  });
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
    default: return "all ranks";
  }
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
  AllReduceAlgorithm algorithm = options_.all_reduce;
  if (algorithm == AllReduceAlgorithm::Auto) algorithm = choose_all_reduce(t.nbytes(), single_host_);
  if (algorithm == AllReduceAlgorithm::Mpi) mpi_count(t.numel(), "all_reduce");
  return {OpInfo{"all_reduce", t.nbytes(), waiting_for(algorithm)},
          [this, t, op, algorithm] { all_reduce_now(t, op, algorithm); }};
}

void MpiCommunicator::all_reduce_now(const Tensor& t, ReduceOp op, AllReduceAlgorithm algorithm) {
  void* data = t.raw_data();
  const auto count = static_cast<std::size_t>(t.numel());
  if (algorithm == AllReduceAlgorithm::Ring) {
    if (!ring_) ring_ = std::make_unique<RingAllReduce>(comm_);
    ring_->run(data, count, t.dtype(), op);
  } else if (algorithm == AllReduceAlgorithm::SharedMemory) {
    if (!shm_) shm_ = std::make_unique<ShmAllReduce>(comm_, host_, kShmChunkBytes);
    shm_->run(data, count, t.dtype(), op);  // averages by itself
    return;
  } else {
    check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), datatype(t.dtype()), reduce_op(op), comm_),
          "MPI_Allreduce");
  }
  if (op == ReduceOp::Avg) divide(data, count, t.dtype(), size_);
}

// ---- the other collectives ----------------------------------------------------
// Blocking operations run on the calling thread when the communicator is idle (run()).
// These use MPI's blocking collectives, which poll inside the library while they wait:
// acceptable for these rarer operations.

void MpiCommunicator::broadcast(Tensor& t, int root) {
  check_host_tensor(t, "broadcast");
  check_rank(root, size_, "broadcast", "root");
  int count = mpi_count(t.numel(), "broadcast");
  thread("broadcast")
      .run({"broadcast", t.nbytes(), root == rank_ ? std::string("all ranks") : peer(root)}, [this, t, root, count] {
        check(MPI_Bcast(t.raw_data(), count, datatype(t.dtype()), root, comm_), "MPI_Bcast");
      });
}

void MpiCommunicator::all_gather(const Tensor& in, Tensor& out) {
  check_host_tensor(in, "all_gather", "in");
  check_host_tensor(out, "all_gather", "out");
  check_gather_shapes(in, out, size_, "all_gather");
  int count = mpi_count(in.numel(), "all_gather");
  mpi_count(out.numel(), "all_gather");
  thread("all_gather").run({"all_gather", out.nbytes(), "all ranks"}, [this, in, out, count] {
    MPI_Datatype type = datatype(in.dtype());
    check(MPI_Allgather(in.raw_data(), count, type, out.raw_data(), count, type, comm_), "MPI_Allgather");
  });
}

void MpiCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  check_host_tensor(in, "reduce_scatter", "in");
  check_host_tensor(out, "reduce_scatter", "out");
  check_scatter_shapes(in, out, size_, "reduce_scatter");
  check_reduction(in, op, "reduce_scatter");
  int count = mpi_count(out.numel(), "reduce_scatter");
  mpi_count(in.numel(), "reduce_scatter");
  thread("reduce_scatter").run({"reduce_scatter", in.nbytes(), "all ranks"}, [this, in, out, op, count] {
    check(MPI_Reduce_scatter_block(in.raw_data(), out.raw_data(), count, datatype(in.dtype()), reduce_op(op), comm_),
          "MPI_Reduce_scatter_block");
    if (op == ReduceOp::Avg) divide(out.raw_data(), static_cast<std::size_t>(count), out.dtype(), size_);
  });
}

// ---- point to point and synchronization ----------------------------------------
// Non-blocking MPI under a Backoff: a pipeline stage may wait long for its neighbour.

void MpiCommunicator::send(const Tensor& t, int dst, int tag) {
  check_host_tensor(t, "send");
  check_rank(dst, size_, "send", "dst");
  DTRAIN_CHECK(dst != rank_, "send: dst {} is this rank", dst);
  DTRAIN_CHECK(tag >= 0, "send: tag must be >= 0, got {}", tag);
  int count = mpi_count(t.numel(), "send");
  thread("send").run({"send", t.nbytes(), peer(dst)}, [this, t, dst, tag, count] {
    MPI_Request request;
    check(MPI_Isend(t.raw_data(), count, datatype(t.dtype()), dst, tag, comm_, &request), "MPI_Isend");
    wait_all(&request, 1, "MPI_Isend", spin_for(t.nbytes()));
  });
}

void MpiCommunicator::recv(Tensor& t, int src, int tag) {
  check_host_tensor(t, "recv");
  check_rank(src, size_, "recv", "src");
  DTRAIN_CHECK(src != rank_, "recv: src {} is this rank", src);
  DTRAIN_CHECK(tag >= 0, "recv: tag must be >= 0, got {}", tag);
  int count = mpi_count(t.numel(), "recv");
  thread("recv").run({"recv", t.nbytes(), peer(src)}, [this, t, src, tag, count] { receive_now(t, src, tag, count); });
}

void MpiCommunicator::receive_now(const Tensor& t, int src, int tag, int count) {
  // Probe first, so that a message of the wrong size is an error naming both sizes rather
  // than a truncation.
  MPI_Message message;
  MPI_Status status;
  Backoff backoff;
  for (;;) {
    int found = 0;
    check(MPI_Improbe(src, tag, comm_, &found, &message, &status), "MPI_Improbe");
    if (found) break;
    backoff.pause();
  }
  MPI_Datatype type = datatype(t.dtype());
  int incoming = 0;
  MPI_Get_count(&status, type, &incoming);
  if (incoming != count) {
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    std::vector<std::byte> discard(static_cast<std::size_t>(bytes));
    MPI_Mrecv(discard.data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE);
    DTRAIN_FAIL("expected {} bytes ({} x {}) from {} with tag {}, got {} bytes", t.nbytes(), count,
                dtype_name(t.dtype()), peer(src), tag, bytes);
  }
  MPI_Request request;
  check(MPI_Imrecv(t.raw_data(), count, type, &message, &request), "MPI_Imrecv");
  wait_all(&request, 1, "MPI_Imrecv", spin_for(t.nbytes()));
}

void MpiCommunicator::barrier() {
  thread("barrier").run({"barrier", 0, "all ranks"}, [this] {
    MPI_Request request;
    check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
    wait_all(&request, 1, "MPI_Ibarrier");
  });
}

std::shared_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  DTRAIN_CHECK(color >= 0, "split: color must be >= 0, got {}", color);
  std::shared_ptr<Communicator> child;
  thread("split").run({"split", 0, "all ranks"}, [this, color, key, &child] {
    MPI_Comm comm;
    check(MPI_Comm_split(comm_, color, key, &comm), "MPI_Comm_split");
    child = std::make_shared<MpiCommunicator>(comm, options_);
  });
  return child;
}

}  // namespace dtrain::dist::mpi
