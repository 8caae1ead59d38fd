#include "comm/checked_communicator.h"

#include "dtrain/core/error.h"

#include <cstring>
#include <utility>

namespace dtrain::dist {

CheckedCommunicator::CheckedCommunicator(CommunicatorPtr inner, CommunicatorPtr records, std::string name)
    : inner_(std::move(inner)), records_(std::move(records)), checker_(std::move(name), inner_->size()) {
  DTRAIN_CHECK(records_->size() == inner_->size() && records_->rank() == inner_->rank(),
               "checking collectives: the records' communicator has rank {} of {}, the checked one rank {} of {}",
               records_->rank(), records_->size(), inner_->rank(), inner_->size());
}

void CheckedCommunicator::check(const CollectiveRecord& call) {
  checker_.check(call, [&](const std::int64_t* mine, std::int64_t* all) {
    const auto words = static_cast<std::int64_t>(kRecordWords);
    Tensor gathered = Tensor::empty({size(), words}, {DType::i64});
    records_->all_gather(Tensor::from_blob(mine, {words}, DType::i64), gathered);
    std::memcpy(all, gathered.raw_data(), gathered.nbytes());
  });
}

WorkPtr CheckedCommunicator::all_reduce_async(Tensor& t, ReduceOp op) {
  std::lock_guard lock(mutex_);
  check(CollectiveRecord::call(CollectiveOp::AllReduce, &t, -1, static_cast<int>(op)));
  return inner_->all_reduce_async(t, op);
}

void CheckedCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  std::lock_guard lock(mutex_);
  check(CollectiveRecord::call(CollectiveOp::AllReduce, &t, -1, static_cast<int>(op)));
  inner_->all_reduce(t, op);
}

void CheckedCommunicator::broadcast(Tensor& t, int root) {
  std::lock_guard lock(mutex_);
  check(CollectiveRecord::call(CollectiveOp::Broadcast, &t, root));
  inner_->broadcast(t, root);
}

// `in` alone: the backend checks that `out` is (size, *in.shape()).
WorkPtr CheckedCommunicator::all_gather_async(const Tensor& in, Tensor& out) {
  std::lock_guard lock(mutex_);
  check(CollectiveRecord::call(CollectiveOp::AllGather, &in));
  return inner_->all_gather_async(in, out);
}

void CheckedCommunicator::all_gather(const Tensor& in, Tensor& out) {
  std::lock_guard lock(mutex_);
  check(CollectiveRecord::call(CollectiveOp::AllGather, &in));
  inner_->all_gather(in, out);
}

WorkPtr CheckedCommunicator::reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) {
  std::lock_guard lock(mutex_);
  check(CollectiveRecord::call(CollectiveOp::ReduceScatter, &in, -1, static_cast<int>(op)));
  return inner_->reduce_scatter_async(in, out, op);
}

void CheckedCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  std::lock_guard lock(mutex_);
  check(CollectiveRecord::call(CollectiveOp::ReduceScatter, &in, -1, static_cast<int>(op)));
  inner_->reduce_scatter(in, out, op);
}

void CheckedCommunicator::barrier() {
  std::lock_guard lock(mutex_);
  check(CollectiveRecord::call(CollectiveOp::Barrier));
  inner_->barrier();
}

// Colors and keys differ between ranks by design: only the call itself is compared.
std::shared_ptr<Communicator> CheckedCommunicator::split(int color, int key) {
  std::lock_guard lock(mutex_);
  check(CollectiveRecord::call(CollectiveOp::Split));
  CommunicatorPtr child = inner_->split(color, key);
  return std::make_shared<CheckedCommunicator>(std::move(child), records_->split(color, key),
                                               fmt::format("{}.split({})", checker_.name(), color));
}

}  // namespace dtrain::dist
