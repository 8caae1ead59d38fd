#include "comm/local_communicator.h"

#include "comm/collective_checks.h"

#include <utility>
#include <vector>

namespace dtrain::dist {
namespace {
class DoneWork final : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

[[noreturn]] void no_peer(const char* op, const char* role, int peer) {
  DTRAIN_FAIL("{}: no peer: the local communicator has a single rank ({} {})", op, role, peer);
}
}  // namespace

WorkPtr LocalCommunicator::all_reduce_async(Tensor& t, ReduceOp op) {
  check_buffer(t, "all_reduce");
  check_reduction(t, op, "all_reduce");
  return std::make_shared<DoneWork>();  // sum, avg, max and min of one value are the value
}

void LocalCommunicator::broadcast(Tensor& t, int root) {
  check_buffer(t, "broadcast");
  check_rank(root, 1, "broadcast", "root");
}

WorkPtr LocalCommunicator::all_gather_async(const Tensor& in, Tensor& out) {
  check_buffer(in, "all_gather", "in");
  check_buffer(out, "all_gather", "out");
  check_gather_shapes(in, out, 1, "all_gather");
  if (!gather_in_place(in, out, 0, "all_gather")) out.select(0, 0).copy_(in);
  return std::make_shared<DoneWork>();
}

WorkPtr LocalCommunicator::reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) {
  check_buffer(in, "reduce_scatter", "in");
  check_buffer(out, "reduce_scatter", "out");
  check_scatter_shapes(in, out, 1, "reduce_scatter");
  check_reduction(in, op, "reduce_scatter");
  out.copy_(in.select(0, 0));
  return std::make_shared<DoneWork>();
}

WorkPtr LocalCommunicator::isend(const Tensor& t, int dst, int tag) { no_peer("isend", "dst", dst); }
RecvWorkPtr LocalCommunicator::irecv(Tensor& t, int src, int tag) { no_peer("irecv", "src", src); }
void LocalCommunicator::send(const Tensor& t, int dst, int tag) { no_peer("send", "dst", dst); }
void LocalCommunicator::recv(Tensor& t, int src, int tag) { no_peer("recv", "src", src); }

// Every message goes to rank 0 itself: the k-th receive with a tag takes the k-th send
// with that tag, as the other backends would match them.
std::vector<WorkPtr> LocalCommunicator::batch_isend_irecv(const std::vector<P2POp>& ops) {
  constexpr const char* kOp = "batch_isend_irecv";
  for (const P2POp& op : ops) {
    const bool receive = op.kind == P2POp::Kind::Recv;
    check_buffer(op.tensor, kOp);
    check_peer(op.peer, 0, 1, kOp, receive ? "src" : "dst", {.self_allowed = true});
    check_tag(op.tag, kOp, false);
  }
  // Match every receive first, so that a batch that cannot complete changes nothing.
  std::vector<bool> taken(ops.size(), false);
  std::vector<std::pair<std::size_t, std::size_t>> pairs;  // (receive, send)
  for (std::size_t r = 0; r < ops.size(); ++r) {
    const P2POp& op = ops[r];
    if (op.kind != P2POp::Kind::Recv) continue;
    std::size_t s = 0;
    while (s < ops.size() && (ops[s].kind != P2POp::Kind::Send || ops[s].tag != op.tag || taken[s])) ++s;
    DTRAIN_CHECK(s < ops.size(),
                 "{}: the receive with tag {} has no send with that tag in the batch (the local "
                 "communicator has no other rank to wait for)",
                 kOp, op.tag);
    const Tensor& sent = ops[s].tensor;
    DTRAIN_CHECK(sent.nbytes() == op.tensor.nbytes() && sent.dtype() == op.tensor.dtype(),
                 "{}: expected {} bytes ({} x {}) from rank 0 with tag {}, got {} bytes ({})", kOp, op.tensor.nbytes(),
                 op.tensor.numel(), dtype_name(op.tensor.dtype()), op.tag, sent.nbytes(), dtype_name(sent.dtype()));
    taken[s] = true;
    pairs.emplace_back(r, s);
  }
  for (std::size_t s = 0; s < ops.size(); ++s) {
    DTRAIN_CHECK(ops[s].kind != P2POp::Kind::Send || taken[s],
                 "{}: the send with tag {} has no receive with that tag in the batch", kOp, ops[s].tag);
  }
  for (auto [r, s] : pairs) {
    Tensor into = ops[r].tensor;
    into.copy_(ops[s].tensor.reshape(into.shape()));
  }
  return std::vector<WorkPtr>(ops.size(), std::make_shared<DoneWork>());
}

std::shared_ptr<Communicator> LocalCommunicator::split(int color, int key) {
  DTRAIN_CHECK(color >= 0, "split: color must be >= 0, got {}", color);
  return std::make_shared<LocalCommunicator>();
}

}  // namespace dtrain::dist
