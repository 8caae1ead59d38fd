#include "dist/local_communicator.h"

#include "dist/collective_checks.h"

namespace dtrain::dist {
namespace {
class DoneWork final : public Work {
 public:
  void wait() override {}
};
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

void LocalCommunicator::all_gather(const Tensor& in, Tensor& out) {
  check_buffer(in, "all_gather", "in");
  check_buffer(out, "all_gather", "out");
  check_gather_shapes(in, out, 1, "all_gather");
  out.select(0, 0).copy_(in);
}

void LocalCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  check_buffer(in, "reduce_scatter", "in");
  check_buffer(out, "reduce_scatter", "out");
  check_scatter_shapes(in, out, 1, "reduce_scatter");
  check_reduction(in, op, "reduce_scatter");
  out.copy_(in.select(0, 0));
}

void LocalCommunicator::send(const Tensor& t, int dst, int tag) {
  DTRAIN_FAIL("send: no peer: the local communicator has a single rank (dst {})", dst);
}

void LocalCommunicator::recv(Tensor& t, int src, int tag) {
  DTRAIN_FAIL("recv: no peer: the local communicator has a single rank (src {})", src);
}

std::shared_ptr<Communicator> LocalCommunicator::split(int color, int key) {
  DTRAIN_CHECK(color >= 0, "split: color must be >= 0, got {}", color);
  return std::make_shared<LocalCommunicator>();
}

}  // namespace dtrain::dist
