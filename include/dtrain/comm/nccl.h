// NCCL: the communicator for CUDA tensors. It is built from any existing communicator
// (normally dist::world(), over MPI), which carries NCCL's 128-byte unique id from rank 0
// to the others; after that every collective runs over NCCL, on the GPUs.
//
//   auto world = dist::world();
//   const Device gpu = dist::rank_cuda_device();      // one GPU per rank of this host
//   auto nccl = dist::nccl_communicator(world, gpu);  // a collective: every rank calls it
//   nccl->all_reduce(grad_on_gpu, dist::ReduceOp::Mean);
//
// DataParallel does this by itself when the model's parameters are on CUDA.
//
// Ordering, with no host synchronisation: each operation waits (on the GPU) for the work
// already queued on the device's compute stream, runs on a communication stream of its
// own, and Work::wait() makes the compute stream wait for it in turn. So a kernel queued
// after wait() sees the result, and the host only blocks where it reads data back (or in
// barrier()). Until wait(), the tensor must stay alive and untouched, as for every backend.
//
// Point to point (isend/irecv/send/recv/batch_isend_irecv): messages have an NCCL
// communicator and a stream of their own, split from the collectives' one when the
// communicator is made, so that a message never waits behind an all-reduce (NCCL runs one
// communicator's operations in order). The host never waits for them either: wait() orders
// the compute stream after the message, as for the collectives.
// - NCCL has no tags: messages between two ranks match in the order they are issued. Tags
//   are checked (>= 0, or kAnyTag for a receive) and reported back by RecvWork::tag(), but
//   not sent. There is no receive from kAnySource: it is refused, naming the alternative
//   (let the sender announce itself over an MPI communicator).
// - NCCL cannot see a message's size: the receive's tensor must have the sender's.
// - A send completes only once the peer's receive runs (no eager buffering as MPI has for
//   small messages), so a ring where every rank sends before it receives deadlocks, and so
//   does a rank that issues a send and then a receive (or a blocking send) while its peer
//   does the same: issue paired messages together with batch_isend_irecv, one NCCL group,
//   or order the pairs (even ranks send first, odd ranks receive first).
// - Unlike MPI, a rank's messages do not pass each other: they share one NCCL
//   communicator and one stream, so each waits for the ones issued before it, whatever
//   their peers. A receive from rank A that is still pending holds up every later message
//   of this rank, to or from any other rank, until A's message arrives (so a receive
//   posted ahead as a mailbox blocks the rest; use an MPI communicator for that).
// - The collectives and the messages are two NCCL communicators on one GPU, and NCCL does
//   not guarantee that two communicators' kernels run at the same time: when ranks issue
//   collectives and messages in different orders (rank 0 an all-reduce then a send, rank
//   1 the matching receive then the all-reduce), each rank's first kernel can wait for the
//   other's and the job deadlocks until the timeout (NCCL's documentation, "Using
//   multiple NCCL communicators concurrently"). Issue them in the same order on every
//   rank, or wait() for one kind before issuing the other.
// - Not thread-safe: a communicator is used by one thread at a time (its operations
//   share one CUDA event for the compute stream, barrier() creates its token on first
//   use, and the watchdog expects operations in the order they were queued).
//
// Failure: a watchdog thread per NCCL communicator polls the operations in flight; one
// that is not done within the timeout, or an asynchronous NCCL error (a peer died), aborts
// NCCL and, by default, ends the job with a message naming the operation, as the MPI
// backend does. Under OnTimeout::Throw the failure is thrown instead, by the next wait()
// or call on the communicator (wait() does not block the host, so it may return before the
// operation has timed out: barrier() or a host read of the result is what waits).
#pragma once

#include "dtrain/core/device.h"
#include "dtrain/comm/communicator.h"

namespace dtrain::dist {

// Whether this build has NCCL (it comes with CUDA support).
bool nccl_built();

// This process's rank among the processes of its host: MPI's own count of the ranks that
// share its memory once dist::world() has been made under an MPI launcher, else the
// launcher's variables (Open MPI, MPICH, Slurm), else 0.
int host_local_rank();
// The GPU for this process: cuda:(host_local_rank() mod the number of devices); make
// dist::world() first, so that any launcher's ranks spread over the GPUs. Throws when there
// is no CUDA device.
Device rank_cuda_device();

// A collective over `bootstrap`: every rank calls it, each with its own device (two ranks
// of one host on the same GPU is an error NCCL reports). The result has bootstrap's ranks
// and size. options.timeout (or DTRAIN_TIMEOUT) bounds every operation. Throws
// dtrain::Error when this build has no NCCL or the device is not a CUDA device.
CommunicatorPtr nccl_communicator(const CommunicatorPtr& bootstrap, Device device,
                                  const CommunicatorOptions& options = {});

}  // namespace dtrain::dist
