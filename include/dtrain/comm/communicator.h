// Communicator: a process group and its collectives and point-to-point messages,
// independent of the transport. Backends: MPI for CPU tensors (src/comm/mpi/), NCCL for
// CUDA tensors (src/comm/cuda/, built from an MPI communicator by nccl_communicator() in
// dtrain/comm/nccl.h), and a single-rank local group without a launcher. Every rank of a
// communicator calls the same collectives in the same order with tensors of the same
// shape and dtype. Collectives and messages work in place on contiguous tensors.
//
// Point-to-point (isend/irecv/batch_isend_irecv) is not queued behind the collectives: a
// message is issued when it is called, even while an all-reduce is queued or running, so
// a pipeline stage can pass activations while its gradients are being reduced.
// Ordering: between one sender and one receiver, messages with the same tag match the
// receives in the order both were issued (MPI's rule; with several threads, the order in
// which the calls happened). Messages with different tags, from different senders, and
// collectives have no order among each other (MPI; on NCCL a pending receive holds up
// every later message of the rank, whatever its peer). A receive from kAnySource (or with
// kAnyTag) takes the earliest message that fits when no receive issued before it could
// take it. NCCL has no tags and no any-source receive; see dtrain/comm/nccl.h.
//
// Failure: each operation runs under the communicator's timeout. Point to point: a send
// is timed from its call, a receive from its first wait() or from when its message
// arrived, whichever comes first (MPI), so a receive posted long before its message and
// not waited on (a mailbox from kAnySource) never times out; on NCCL every message is
// timed from its call. When an operation is not done within it, the rank reports which
// operation it was in and which peers it was waiting for, and then by default the whole
// job is aborted (MPI_Abort), so a dead or stalled rank never leaves the others hanging
// silently. A program that embeds the library can choose OnTimeout::Throw instead.
//
// Checking the calls (DTRAIN_CHECK_COLLECTIVES=1 on every rank, or
// CommunicatorOptions::check_collectives): before each collective the ranks all-gather a
// small record of it (operation, dtype, shape, root, reduce op, its sequence number on the
// communicator and a fingerprint of every earlier call) and compare. When they differ,
// every rank throws the same dtrain::Error before any enters the collective, instead of
// hanging or reducing mismatched buffers, e.g. "collective mismatch at call #17 on
// communicator 'world': rank 0 called all_reduce(f32 [3], sum) but rank 1 called
// all_reduce(f32 [4], sum)", and the communicator stays usable. Checked: all_reduce,
// broadcast, all_gather, reduce_scatter (each with its _async form), barrier and split,
// whose children are checked too ("world.split(1)"). Not checked: point-to-point messages
// (two ranks).
// - MPI: the exchange runs on the same MPI communicator just before the collective, on its
//   communication thread, so an async collective stays async; a mismatch fails it from
//   its wait().
// - NCCL (nccl_communicator() with the option or the variable): the records go over a
//   split of the bootstrap communicator, on the host, when the collective is called; the
//   call then waits for every rank to make its call (never for the GPU), and a mismatch
//   throws from the call itself.
// - The local (single-rank) communicator has nobody to compare with and checks nothing.
// Off, the default, costs one branch per collective.
#pragma once

#include "dtrain/tensor/ops.h"
#include "dtrain/tensor/tensor.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

// The tensor reductions' enum: Sum, Mean (the average over the ranks), Max, Min.
using dtrain::ReduceOp;

// Wildcards for irecv: a message from any rank (MPI only), with any tag.
inline constexpr int kAnySource = -1;
inline constexpr int kAnyTag = -1;

// How all_reduce moves data (MPI). Auto picks per message size, rank count and host count
// from the collective table (docs/COLLECTIVES.md: shipped defaults measured by
// `bench_allreduce --tune-into`, or the file DTRAIN_COLLECTIVE_TABLE names); the others force one
// algorithm (for benchmarks and tests).
enum class AllReduceAlgorithm : std::uint8_t {
  Auto,
  Mpi,                // MPI_Allreduce
  Ring,               // reduce-scatter + all-gather over MPI point-to-point, chunked and pipelined
  SharedMemory,       // through an MPI-3 shared-memory window on one host; across hosts the
                      // hierarchical scheme (shared memory inside, an algorithm among leaders)
  RecursiveDoubling,  // log2(p) whole-vector swaps: small messages
  Rabenseifner,       // recursive halving reduce-scatter + recursive doubling all-gather
};
const char* algorithm_name(AllReduceAlgorithm a);
AllReduceAlgorithm parse_algorithm(const std::string& name);  // throws naming the text

// How reduce_scatter, all_gather and broadcast move data (MPI). Auto: the all-reduce
// table's list for that collective (docs/COLLECTIVES.md), MPI's own collective where it
// has none. Each collective takes Mpi, SharedMemory and two of the others:
//   reduce_scatter: Ring, RecursiveHalving;  all_gather: Ring, RecursiveDoubling;
//   broadcast: BinomialTree, Chain.
enum class CollectiveAlgorithm : std::uint8_t {
  Auto,
  Mpi,                // MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast
  Ring,               // n-1 steps between ring neighbours, chunked: the bandwidth optimum
  RecursiveHalving,   // reduce_scatter in log2(p) steps, each exchanging half of what is left
  RecursiveDoubling,  // all_gather in log2(p) steps, each doubling what a rank holds
  BinomialTree,       // broadcast in log2(p) rounds of whole-message sends: small messages
  Chain,              // broadcast forwarded down the ranks in pipelined chunks: large messages
  SharedMemory,       // an MPI-3 shared-memory window inside each host; across hosts MPI's collective
                      // among the hosts' first ranks (all_gather, broadcast) or among the ranks of each
                      // host rank (reduce_scatter, whose hosts must hold equal rank counts: a table's
                      // choice runs the ring where they do not, or hold one rank each)
};
const char* collective_algorithm_name(CollectiveAlgorithm a);
CollectiveAlgorithm parse_collective_algorithm(const std::string& name);  // throws naming the text

// What a rank does when one of its operations outlives the timeout.
enum class OnTimeout : std::uint8_t {
  // Print the operation and the peers it waits for, and end the whole job (abort_job).
  AbortJob,
  // For programs that embed the library and handle the failure themselves: the stalled
  // operation fails with a dtrain::Error naming it (from its wait(); NCCL, which does not
  // block the host in wait(), from the next call on the communicator), and the
  // communicator is unusable: every later call throws the same failure. What the stalled
  // operation holds stays with it: MPI cannot cancel a collective, so a communicator
  // whose collective never ends keeps that operation's thread and memory, and its MPI
  // objects are left to MPI_Finalize; NCCL's communicator is aborted (ncclCommAbort).
  Throw,
};

struct CommunicatorOptions {
  // DTRAIN_TIMEOUT (seconds) overrides the default when set.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  AllReduceAlgorithm all_reduce = AllReduceAlgorithm::Auto;
  // With all_reduce = SharedMemory across hosts: what the hosts' leaders run among
  // themselves (Mpi, Ring, RecursiveDoubling or Rabenseifner; Auto: Ring).
  AllReduceAlgorithm leaders_all_reduce = AllReduceAlgorithm::Auto;
  // The other collectives' algorithms (MPI); a forced one must be one its collective takes.
  CollectiveAlgorithm reduce_scatter = CollectiveAlgorithm::Auto;
  CollectiveAlgorithm all_gather = CollectiveAlgorithm::Auto;
  CollectiveAlgorithm broadcast = CollectiveAlgorithm::Auto;
  OnTimeout on_timeout = OnTimeout::AbortJob;
  // Compare every collective call across the ranks before running it (see the top of
  // this file). DTRAIN_CHECK_COLLECTIVES=1 (or 0) overrides it when set.
  bool check_collectives = false;
  // MPI: which host this rank is on, for the shared-memory and hierarchical all-reduce.
  // -1 (the default): the ranks that MPI finds share memory (MPI_COMM_TYPE_SHARED). An id
  // >= 0 on every rank: the ranks with the same id form one host; for emulated hosts on
  // one machine (network namespaces, bench/netns/), where MPI sees one host. Ranks given
  // one id must really share memory. DTRAIN_HOST_ID overrides it when set.
  int host_id = -1;
};

// An operation in flight. wait() blocks until it is done and rethrows its failure (NCCL:
// see dtrain/comm/nccl.h). Waiting again returns (or throws) the same.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Whether the operation is known to have finished, without waiting: then wait() returns
  // (or throws) at once. False while it runs, and wherever the transport cannot tell
  // without blocking (NCCL, the collectives' thread): a hint for choosing what to do next
  // (the pipeline fills a wait for a receive with other work), never a substitute for wait().
  // MPI's point-to-point messages answer after one round of their progress loop.
  virtual bool test() { return false; }
};
using WorkPtr = std::shared_ptr<Work>;

// Work that, once `work` has finished, runs `next` once on the thread that waits (a 16-bit
// result cast back, a second collective after the first): wait() rethrows `work`'s failure
// on every call, and a failure of `next` is not retried. `next`, with what it holds (a
// buffer the transport reads until then), is released once it has run.
WorkPtr then(WorkPtr work, std::function<void()> next);
// Work that waits for each of `works`, in order.
WorkPtr when_all(std::vector<WorkPtr> works);

// A receive in flight: after wait() has returned, who sent the message and with which tag
// (what a receive from kAnySource or with kAnyTag needs to answer).
class RecvWork : public Work {
 public:
  virtual int source() const = 0;  // a rank of this communicator
  virtual int tag() const = 0;
};
using RecvWorkPtr = std::shared_ptr<RecvWork>;

// One message of batch_isend_irecv.
struct P2POp {
  enum class Kind : std::uint8_t { Send, Recv };
  Kind kind = Kind::Send;
  Tensor tensor;  // read by a send, written by a receive
  int peer = 0;   // the destination of a send, the source of a receive
  int tag = 0;

  static P2POp send(const Tensor& t, int dst, int tag = 0) { return {Kind::Send, t, dst, tag}; }
  static P2POp recv(const Tensor& t, int src, int tag = 0) { return {Kind::Recv, t, src, tag}; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi", "nccl", "local"

  // In place. The tensor must stay alive and untouched until the work is waited on.
  virtual WorkPtr all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // Blocking. Virtual so that a backend can run it on the calling thread rather than hand
  // it to its communication thread and wait (the hand-off costs microseconds).
  virtual void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum) { all_reduce_async(t, op)->wait(); }
  virtual void broadcast(Tensor& t, int root) = 0;
  // out has shape (size(), *in.shape()); rank r's input lands in out[r]. `in` may be out[rank()]
  // itself (in place: no copy of this rank's part); any other overlap is an error.
  virtual WorkPtr all_gather_async(const Tensor& in, Tensor& out) = 0;
  // in has shape (size(), *out.shape()); rank r receives the reduction of every rank's in[r].
  virtual WorkPtr reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::Sum) = 0;
  // Blocking forms (virtual for the same reason as all_reduce). Asynchronous collectives
  // of one communicator run in the order they were called, whatever their kind, so a
  // sharded optimizer can queue a bucket's reduce-scatter behind the previous all-gather.
  virtual void all_gather(const Tensor& in, Tensor& out) { all_gather_async(in, out)->wait(); }
  virtual void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::Sum) {
    reduce_scatter_async(in, out, op)->wait();
  }

  // ---- point to point (see the ordering rules at the top) ----
  // The peer is another rank (or kAnySource for a receive); tags are >= 0 (or kAnyTag for
  // a receive). The tensor must stay alive and untouched until the work is waited on (on
  // MPI a send keeps its own reference until the message is done, so only "untouched"
  // applies to a send's tensor there). A
  // receive's tensor must have the size of the message: a message of another size is an
  // error naming both sizes, and the tensor is left as it was (MPI; NCCL cannot tell).
  virtual WorkPtr isend(const Tensor& t, int dst, int tag = 0) = 0;
  virtual RecvWorkPtr irecv(Tensor& t, int src, int tag = 0) = 0;
  // Issues every message at once and returns one Work per op, in order. Sends and
  // receives in one batch never wait for each other, so a ring (every rank sends right and
  // receives left) cannot deadlock, on NCCL too (one ncclGroupStart/End), where a plain
  // send waits for its receive. Peers are named ranks (no kAnySource or kAnyTag), and may
  // be this rank itself: its sends then match its receives.
  virtual std::vector<WorkPtr> batch_isend_irecv(const std::vector<P2POp>& ops) = 0;
  // Blocking: isend(...)->wait() and irecv(...)->wait().
  virtual void send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual void recv(Tensor& t, int src, int tag = 0) = 0;
  virtual void barrier() = 0;
  // Ranks with equal color form a new communicator, ordered by key (then old rank).
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;
};
using CommunicatorPtr = std::shared_ptr<Communicator>;

// The group of all processes: over MPI when launched by mpirun/srun (MPI is initialized
// with MPI_THREAD_MULTIPLE on first use and finalized at exit), a single-rank "local"
// communicator otherwise (every collective is then the identity).
CommunicatorPtr world(const CommunicatorOptions& options = {});
// The group of this process alone (what world() is without a launcher): every collective
// is the identity, and it takes tensors on any device.
CommunicatorPtr single_process_communicator();
// This process's rank among the processes on its host (those that share its memory, or
// those given its DTRAIN_HOST_ID), found when the first MPI world() was made; -1 before
// that, or without MPI.
int host_rank();

// Ends the whole job from any rank when it runs under MPI: prints "rank R: message" to
// stderr and aborts every process (MPI_Abort, exit code 1), so it does not return. Without
// MPI there is no other process to end: it prints and returns, and the caller ends its own
// way (main() returns non-zero; a watchdog fails the stalled operation, which then throws).
// For main() and the watchdogs; library code throws instead.
void abort_job(const std::string& message);

// Whether a communicator of this process has forgotten a lost peer (forget_peer).
bool peer_was_lost();

// A rank that the others have dropped (a parameter-server worker that stalled past the
// servers' limit) must not end the job when it wakes and finds its messages timed out or
// refused: abort_job first calls this check, and when it returns a message, prints it and
// ends this process alone, with exit code 0 and without MPI_Finalize. One check per
// process (the latest set); an empty function removes it.
void set_departure_check(std::function<std::string()> check);

// The body of a program's main(): runs body(world(options)) and returns its exit code. An
// error (dtrain::Error or any std::exception) prints "<program>: error: <message>" and
// returns 1; under mpirun it ends the whole job instead (abort_job), since the other ranks
// would wait for this one in their next collective. With DTRAIN_STATUS_FILE set (by
// dtrain-launch --survive-lost-workers), rank 0 writes its exit code there when it ends and
// a rank that fails (abort_job) writes 1, since under mpirun's --enable-recovery mpirun's
// own exit status no longer tells.
int run_program(const char* program, const std::function<int(const CommunicatorPtr&)>& body,
                const CommunicatorOptions& options = {});

}  // namespace dtrain::dist
