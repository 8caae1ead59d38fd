// Communicator: a process group and its collectives, independent of the transport.
// Backends: MPI for CPU tensors (src/dist/mpi/), NCCL for CUDA tensors (later). Every
// rank of a communicator calls the same collectives in the same order with tensors of
// the same shape and dtype. Collectives work in place on contiguous tensors.
//
// Failure: each operation runs under the communicator's timeout. When an operation is
// not done within it, the rank prints which operation it was in and which peers it was
// waiting for, and the whole job is aborted (MPI_Abort), so a dead or stalled rank
// never leaves the others hanging silently.
#pragma once

#include "dtrain/tensor/tensor.h"

#include <chrono>
#include <memory>
#include <string>

namespace dtrain::dist {

enum class ReduceOp : std::uint8_t { Sum, Avg, Max, Min };

// How all_reduce moves data. Auto picks per message size from measurements
// (bench_allreduce); the others force one algorithm (for benchmarks and tests).
enum class AllReduceAlgorithm : std::uint8_t {
  Auto,
  Mpi,           // MPI_Allreduce
  Ring,          // reduce-scatter + all-gather over MPI point-to-point, chunked and pipelined
  SharedMemory,  // ranks on one host reduce through an MPI-3 shared-memory window
};
const char* algorithm_name(AllReduceAlgorithm a);
AllReduceAlgorithm parse_algorithm(const std::string& name);  // throws naming the text

struct CommunicatorOptions {
  // DTRAIN_TIMEOUT (seconds) overrides the default when set.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  AllReduceAlgorithm all_reduce = AllReduceAlgorithm::Auto;
};

// A collective in flight. wait() blocks until it is done and rethrows its failure.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi", "local"

  // In place. The tensor must stay alive and untouched until the work is waited on.
  virtual WorkPtr all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // Blocking. Virtual so that a backend can run it on the calling thread rather than hand
  // it to its communication thread and wait (the hand-off costs microseconds).
  virtual void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum) { all_reduce_async(t, op)->wait(); }
  virtual void broadcast(Tensor& t, int root) = 0;
  // out has shape (size(), *in.shape()); rank r's input lands in out[r].
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // in has shape (size(), *out.shape()); rank r receives the reduction of every rank's in[r].
  virtual void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::Sum) = 0;
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

// Ends the whole job from any rank when it runs under MPI: prints "rank R: message" to
// stderr and aborts every process (MPI_Abort, exit code 1), so it does not return. Without
// MPI there is no other process to end: it prints and returns, and the caller ends its own
// way (main() returns non-zero; a watchdog fails the stalled operation, which then throws).
// For main() and the watchdogs; library code throws instead.
void abort_job(const std::string& message);

}  // namespace dtrain::dist
