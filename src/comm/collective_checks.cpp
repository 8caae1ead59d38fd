#include "comm/collective_checks.h"

namespace dtrain::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::kCount: break;
  }
  return "?";
}

void check_buffer(const Tensor& t, const char* op, const char* what) {
  DTRAIN_CHECK(t.defined(), "{}: {} is undefined", op, what);
  DTRAIN_CHECK(t.is_contiguous(), "{}: expected a contiguous {}, got shape {} with strides {} (call .contiguous())", op,
               what, shape_str(t.shape()), shape_str(t.strides()));
}

void check_cpu(const Tensor& t, const char* op, const char* what) {
  DTRAIN_CHECK(t.device().is_cpu(),
               "{}: the MPI backend takes CPU tensors, got a {} on {} (use the NCCL backend for CUDA tensors)", op,
               what, t.device().str());
}

void check_reduction(const Tensor& t, ReduceOp reduce, const char* op) {
  const DType d = t.dtype();
  DTRAIN_CHECK(is_floating(d) || d == DType::i32 || d == DType::i64,
               "{}: dtype {} cannot be reduced (f32, f64, f16, bf16, i32, i64)", op, dtype_name(d));
  DTRAIN_CHECK(reduce < ReduceOp::kCount, "{}: unknown reduce op {}", op, static_cast<int>(reduce));
  DTRAIN_CHECK(reduce != ReduceOp::Mean || is_floating(d),
               "{}: {} needs a floating dtype (f32, f64, f16, bf16), got {}", op, reduce_op_name(reduce),
               dtype_name(d));
}

namespace {
Shape stacked(int size, const Shape& inner) {
  Shape s{size};
  s.insert(s.end(), inner.begin(), inner.end());
  return s;
}
}  // namespace

void check_gather_shapes(const Tensor& in, const Tensor& out, int size, const char* op) {
  Shape want = stacked(size, in.shape());
  DTRAIN_CHECK(out.shape() == want && out.dtype() == in.dtype(),
               "{}: out must have shape {} (ranks x in.shape) and dtype {}, got {} {}", op, shape_str(want),
               dtype_name(in.dtype()), shape_str(out.shape()), dtype_name(out.dtype()));
}

bool gather_in_place(const Tensor& in, const Tensor& out, int rank, const char* op) {
  if (!in.same_storage(out)) return false;
  const bool own_slot = in.is_contiguous() && out.is_contiguous() && in.offset() == out.offset() + rank * in.numel();
  DTRAIN_CHECK(own_slot, "{}: in shares out's memory but is not out[{}] (this rank's slot); in place, in must be it",
               op, rank);
  return true;
}

void check_scatter_shapes(const Tensor& in, const Tensor& out, int size, const char* op) {
  Shape want = stacked(size, out.shape());
  DTRAIN_CHECK(in.shape() == want && in.dtype() == out.dtype(),
               "{}: in must have shape {} (ranks x out.shape) and dtype {}, got {} {}", op, shape_str(want),
               dtype_name(out.dtype()), shape_str(in.shape()), dtype_name(in.dtype()));
}

void check_rank(int r, int size, const char* op, const char* role) {
  DTRAIN_CHECK(r >= 0 && r < size, "{}: {} {} is out of range for a communicator of {} rank(s)", op, role, r, size);
}

void check_peer(int peer, int rank, int size, const char* op, const char* role, PeerRules rules) {
  if (peer == kAnySource) {
    DTRAIN_CHECK(rules.any_allowed, "{}: {} kAnySource is only for irecv and recv", op, role);
    return;
  }
  check_rank(peer, size, op, role);
  DTRAIN_CHECK(peer != rank || rules.self_allowed,
               "{}: {} {} is this rank (messages to oneself only in batch_isend_irecv, where they cannot deadlock)", op,
               role, peer);
}

void check_tag(int tag, const char* op, bool any_allowed) {
  DTRAIN_CHECK(tag >= 0 || (tag == kAnyTag && any_allowed), "{}: tag must be >= 0{}, got {}", op,
               any_allowed ? " or kAnyTag" : "", tag);
}

}  // namespace dtrain::dist
