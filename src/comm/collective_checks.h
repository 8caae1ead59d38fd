// Argument checks shared by the communicator backends. Each throws dtrain::Error with a
// message that starts with the operation's name and shows the offending values.
#pragma once

#include "dtrain/comm/communicator.h"

namespace dtrain::dist {

const char* reduce_op_name(ReduceOp op);

// Defined and contiguous: collectives work in place on the raw buffer.
void check_buffer(const Tensor& t, const char* op, const char* what = "tensor");
// On the CPU: the MPI backend moves host memory.
void check_cpu(const Tensor& t, const char* op, const char* what = "tensor");
// A dtype every backend reduces (f32, f64, f16, bf16, i32, i64; MPI reduces the 16-bit
// floats with operations of dtrain's own); Mean only for the floating ones.
void check_reduction(const Tensor& t, ReduceOp reduce, const char* op);
// all_gather: out has shape (size, *in.shape()) and in's dtype.
void check_gather_shapes(const Tensor& in, const Tensor& out, int size, const char* op);
// True when `in` is out[rank] itself (contiguous, same storage and place): the all-gather
// runs in place. Throws when `in` shares out's storage in any other way.
bool gather_in_place(const Tensor& in, const Tensor& out, int rank, const char* op);
// reduce_scatter: in has shape (size, *out.shape()) and out's dtype.
void check_scatter_shapes(const Tensor& in, const Tensor& out, int size, const char* op);
// 0 <= r < size; `role` names the argument ("root", "dst", "src").
void check_rank(int r, int size, const char* op, const char* role);

// The peer of a message: a rank in range, another than `rank` unless `self_allowed` (in a
// batch), or kAnySource where `any_allowed` (a receive on MPI).
struct PeerRules {
  bool self_allowed = false;
  bool any_allowed = false;
};
void check_peer(int peer, int rank, int size, const char* op, const char* role, PeerRules rules);
// A tag: >= 0, or kAnyTag where `any_allowed` (a receive outside a batch).
void check_tag(int tag, const char* op, bool any_allowed);

}  // namespace dtrain::dist
