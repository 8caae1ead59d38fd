// MPI for dtrain: initialized once with MPI_THREAD_MULTIPLE, finalized at exit after every
// live communicator has shut down; MPI errors as dtrain::Error; the MPI names of dtrain's
// dtypes and reductions.
#pragma once

#include "dtrain/comm/communicator.h"

#include <mpi.h>

namespace dtrain::dist::mpi {

// Initializes MPI unless it is already running (then the application owns it and also
// finalizes it). Throws unless the library provides MPI_THREAD_MULTIPLE.
void ensure_initialized();

// Throws dtrain::Error "<call> failed: <MPI's error string>" unless rc is MPI_SUCCESS.
// Communicators and windows use MPI_ERRORS_RETURN, so failures arrive here.
void check(int rc, const char* call);

MPI_Datatype datatype(DType dtype);
// Sum (also for Mean, which divides afterwards), Max, Min. MPI has no 16-bit floats: for
// f16 and bf16 (moved as MPI_UINT16_T) these are operations of dtrain's own (MPI_Op_create
// over reduce_kernels' combine), made on first use.
MPI_Op reduce_op(ReduceOp op, DType dtype);

// Objects holding MPI resources register here: before MPI_Finalize, the exit handler calls
// shutdown() on those still alive.
class Resource {
 public:
  virtual void shutdown() = 0;

 protected:
  ~Resource() = default;
};
void track(Resource* r);
void untrack(Resource* r);

}  // namespace dtrain::dist::mpi
