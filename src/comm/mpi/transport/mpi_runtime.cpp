#include "comm/mpi/transport/mpi_runtime.h"

#include "comm/reduce_kernels.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <vector>

namespace dtrain::dist::mpi {
namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<Resource*>& registry() {
  static std::vector<Resource*> r;
  return r;
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // Open MPI's MPI_Finalize waits for a dead peer that was sent anything: a process that
  // went on without a lost rank ends without it (mpirun --enable-recovery allows that).
  if (finalized || peer_was_lost()) return;
  std::vector<Resource*> alive;
  {
    std::lock_guard lock(registry_mutex());
    alive = registry();
  }
  // Newest first: a communicator split from another goes before its parent. An exception
  // leaving an exit handler would call std::terminate: a failed shutdown is reported and
  // the rest go on.
  for (auto it = alive.rbegin(); it != alive.rend(); ++it) {
    try {
      (*it)->shutdown();
    } catch (const std::exception& e) {
      spdlog::error("dist: closing a communicator at exit failed: {}", e.what());
    }
  }
  MPI_Finalize();
}
}  // namespace

void ensure_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = 0;
    if (initialized) {
      MPI_Query_thread(&provided);
    } else {
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
      // Touch the registry first so that it outlives the exit handler registered after it.
      registry();
      std::atexit(finalize_at_exit);
    }
    DTRAIN_CHECK(provided == MPI_THREAD_MULTIPLE,
                 "dist: the MPI library provides thread level {}, dtrain needs MPI_THREAD_MULTIPLE ({}): its "
                 "communication threads call MPI concurrently",
                 provided, MPI_THREAD_MULTIPLE);
  });
}

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  DTRAIN_FAIL("{} failed: {} (MPI error {})", call, std::string(text, static_cast<std::size_t>(length)), rc);
}

MPI_Datatype datatype(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i64: return MPI_INT64_T;
    case DType::i32: return MPI_INT32_T;
    case DType::u8: return MPI_UINT8_T;
    // 16 bits as they are; reduce_op gives their reductions.
    case DType::f16:
    case DType::bf16: return MPI_UINT16_T;
  }
  DTRAIN_FAIL("dist: no MPI datatype for dtype {}", static_cast<int>(dtype));
}

namespace {
// MPI_User_function over `len` elements of T: inout = in (op) inout.
template <class T, ReduceOp R>
void half_reduction(void* in, void* inout, int* len, MPI_Datatype*) {
  combine(inout, inout, in, static_cast<std::size_t>(*len), dtype_v<T>, R);
}

template <class T>
MPI_Op half_op(ReduceOp op) {
  // Made once per (dtype, op), after MPI_Init (reduce_op runs on a communicator's thread);
  // MPI_Finalize frees them.
  static const auto make = [](MPI_User_function* f) {
    MPI_Op made = MPI_OP_NULL;
    check(MPI_Op_create(f, /*commute=*/1, &made), "MPI_Op_create");
    return made;
  };
  static const MPI_Op sum = make(&half_reduction<T, ReduceOp::Sum>);
  static const MPI_Op max = make(&half_reduction<T, ReduceOp::Max>);
  static const MPI_Op min = make(&half_reduction<T, ReduceOp::Min>);
  return op == ReduceOp::Max ? max : op == ReduceOp::Min ? min : sum;
}
}  // namespace

MPI_Op reduce_op(ReduceOp op, DType dtype) {
  if (dtype == DType::f16) return half_op<Half>(op);
  if (dtype == DType::bf16) return half_op<BFloat16>(op);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::kCount: break;
  }
  DTRAIN_FAIL("dist: unknown reduce op {}", static_cast<int>(op));
}

void track(Resource* r) {
  std::lock_guard lock(registry_mutex());
  registry().push_back(r);
}

void untrack(Resource* r) {
  std::lock_guard lock(registry_mutex());
  auto& v = registry();
  v.erase(std::remove(v.begin(), v.end(), r), v.end());
}

}  // namespace dtrain::dist::mpi
