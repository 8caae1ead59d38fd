// The NCCL backend (see dtrain/comm/nccl.h for the contract). Each operation:
//   1. the communication stream (the collectives' or the messages') waits for the compute
//      stream (an event), so NCCL reads what the kernels queued before it wrote;
//   2. the NCCL call is queued on the communication stream;
//   3. a `done` event is recorded after it and handed to the watchdog and to the Work;
//   4. Work::wait() makes the compute stream wait for `done`.
// Blocking operations are the same followed by wait(). Nothing blocks the host except
// barrier(), which is its job.
#include "comm/cuda/nccl_watchdog.h"
#include "comm/deadline.h"
#include "comm/checked_communicator.h"
#include "comm/collective_checks.h"
#include "comm/communicator_options.h"
#include "dtrain/core/environment.h"
#include "dtrain/comm/nccl.h"
#include "dtrain/tensor/stream.h"

#include <fmt/format.h>

#include <array>
#include <cstring>

namespace dtrain::dist {
namespace {

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i64: return ncclInt64;
    case DType::i32: return ncclInt32;
    case DType::u8: return ncclUint8;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
  }
  DTRAIN_FAIL("nccl: unknown dtype {}", static_cast<int>(d));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Mean: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::kCount: break;
  }
  DTRAIN_FAIL("nccl: unknown reduce op {}", static_cast<int>(op));
}

// Makes the compute stream wait for one operation's `done` event.
class StreamOrder {
 public:
  StreamOrder(std::shared_ptr<nccl::Event> done, cudaStream_t compute, std::shared_ptr<nccl::Watchdog> watchdog)
      : done_(std::move(done)), compute_(compute), watchdog_(std::move(watchdog)) {}
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;
  // A Work dropped without wait() still orders the compute stream after the operation:
  // otherwise its tensor's block could go back to the cache and to a kernel while NCCL
  // still uses it. (Waiting twice on one event costs nothing; a destructor cannot throw.)
  ~StreamOrder() { cudaStreamWaitEvent(compute_, done_->get(), 0); }

  void wait() const {
    watchdog_->rethrow_async_error();
    DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_->get(), 0));
  }

 private:
  std::shared_ptr<nccl::Event> done_;
  cudaStream_t compute_;
  std::shared_ptr<nccl::Watchdog> watchdog_;
};

class NcclWork final : public Work {
 public:
  template <class... Args>
  explicit NcclWork(Args&&... args) : order_(std::forward<Args>(args)...) {}
  void wait() override { order_.wait(); }

 private:
  StreamOrder order_;
};

// NCCL carries no tag and receives from a named rank only: source() and tag() are the
// receive's own.
class NcclRecvWork final : public RecvWork {
 public:
  template <class... Args>
  NcclRecvWork(int source, int tag, Args&&... args) : order_(std::forward<Args>(args)...), source_(source), tag_(tag) {}
  void wait() override { order_.wait(); }
  int source() const override { return source_; }
  int tag() const override { return tag_; }

 private:
  StreamOrder order_;
  int source_;
  int tag_;
};

// NCCL runs one communicator's operations one after another, in the order they were
// queued: a send queued behind an all-reduce would wait for it. So messages have an NCCL
// communicator and a stream of their own (a Lane), split from the collectives' one when
// the communicator is made (ncclCommSplit is collective, so it cannot wait for the first
// message, which only two ranks take part in). NCCL connects a pair of ranks on their
// first message, so the second communicator costs little until it is used.
struct Lane {
  std::shared_ptr<nccl::Watchdog> watchdog;  // owns the ncclComm_t
  cudaStream_t stream = nullptr;
};

class NcclCommunicator final : public Communicator {
 public:
  // Owns `comm` from here on (the watchdog destroys it, also when this throws).
  NcclCommunicator(ncclComm_t comm, int device, const CommunicatorOptions& options)
      : device_(device), options_(options) {
    collectives_.watchdog = std::make_shared<nccl::Watchdog>(comm, device, options.timeout, options.on_timeout);
    cuda::DeviceGuard guard(device_);
    rank_ = collectives_.watchdog->rank();
    size_ = collectives_.watchdog->size();
    ncclComm_t p2p = split_within_deadline(collectives_, 0, rank_, "the messages' communicator");
    messages_.watchdog = std::make_shared<nccl::Watchdog>(p2p, device, options.timeout, options.on_timeout);
    // The highest priority: a gradient bucket's all-reduce should not queue behind the
    // rest of backward's kernels, nor a pipeline's activations. (Numerically lower is higher.)
    int least = 0, greatest = 0;
    DTRAIN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    try {
      for (Lane* lane : {&collectives_, &messages_}) {
        DTRAIN_CUDA_CHECK(cudaStreamCreateWithPriority(&lane->stream, cudaStreamNonBlocking, greatest));
      }
      DTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    } catch (...) {
      // No destructor runs for a constructor that throws.
      for (Lane* lane : {&collectives_, &messages_}) {
        if (lane->stream != nullptr) cudaStreamDestroy(lane->stream);
      }
      throw;
    }
    compute_ = static_cast<cudaStream_t>(device_stream(Device::cuda(device_)));
  }

  // Waits for the operations in flight (a communicator is destroyed between steps, not
  // inside one); the watchdogs then destroy the NCCL communicators once no Work holds them.
  // A destructor must not throw: failures are ignored.
  ~NcclCommunicator() override {
    // Raw calls, errors ignored: DeviceGuard throws, and a destructor must not.
    int previous = -1;
    const bool switched =
        cudaGetDevice(&previous) == cudaSuccess && previous != device_ && cudaSetDevice(device_) == cudaSuccess;
    for (Lane* lane : {&collectives_, &messages_}) {
      if (lane->stream != nullptr) cudaStreamSynchronize(lane->stream);
    }
    if (compute_ready_ != nullptr) cudaEventDestroy(compute_ready_);
    for (Lane* lane : {&collectives_, &messages_}) {
      if (lane->stream != nullptr) cudaStreamDestroy(lane->stream);
    }
    if (switched) cudaSetDevice(previous);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  WorkPtr all_reduce_async(Tensor& t, ReduceOp op) override {
    check_gpu_buffer(t, "all_reduce");
    check_reduction(t, op, "all_reduce");
    return work(collectives_, fmt::format("all_reduce ({}, {} bytes)", reduce_op_name(op), t.nbytes()),
                [&](ncclComm_t c, cudaStream_t s) {
                  return ncclAllReduce(t.raw_data(), t.raw_data(), count(t), nccl_type(t.dtype()), nccl_op(op), c, s);
                });
  }

  void broadcast(Tensor& t, int root) override {
    check_gpu_buffer(t, "broadcast");
    check_rank(root, size_, "broadcast", "root");
    work(collectives_, fmt::format("broadcast from rank {} ({} bytes)", root, t.nbytes()),
         [&](ncclComm_t c, cudaStream_t s) {
           return ncclBroadcast(t.raw_data(), t.raw_data(), count(t), nccl_type(t.dtype()), root, c, s);
         })
        ->wait();
  }

  WorkPtr all_gather_async(const Tensor& in, Tensor& out) override {
    check_gpu_buffer(in, "all_gather", "in");
    check_gpu_buffer(out, "all_gather", "out");
    check_gather_shapes(in, out, size_, "all_gather");
    gather_in_place(in, out, rank_, "all_gather");  // NCCL runs out[rank] in place as it is
    return work(collectives_, fmt::format("all_gather ({} bytes per rank)", in.nbytes()),
                [&](ncclComm_t c, cudaStream_t s) {
                  return ncclAllGather(in.raw_data(), out.raw_data(), count(in), nccl_type(in.dtype()), c, s);
                });
  }

  WorkPtr reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    check_gpu_buffer(in, "reduce_scatter", "in");
    check_gpu_buffer(out, "reduce_scatter", "out");
    check_scatter_shapes(in, out, size_, "reduce_scatter");
    check_reduction(in, op, "reduce_scatter");
    return work(collectives_, fmt::format("reduce_scatter ({}, {} bytes per rank)", reduce_op_name(op), out.nbytes()),
                [&](ncclComm_t c, cudaStream_t s) {
                  return ncclReduceScatter(in.raw_data(), out.raw_data(), count(out), nccl_type(in.dtype()),
                                           nccl_op(op), c, s);
                });
  }

  // ---- point to point: on the messages' lane; tags are checked and reported, not sent ----

  WorkPtr isend(const Tensor& t, int dst, int tag) override { return post_send(t, dst, tag, "isend"); }
  RecvWorkPtr irecv(Tensor& t, int src, int tag) override { return post_recv(t, src, tag, "irecv"); }
  void send(const Tensor& t, int dst, int tag) override { post_send(t, dst, tag, "send")->wait(); }
  void recv(Tensor& t, int src, int tag) override { post_recv(t, src, tag, "recv")->wait(); }

  // One NCCL group: NCCL starts the sends and receives together, so none waits for another.
  std::vector<WorkPtr> batch_isend_irecv(const std::vector<P2POp>& ops) override {
    constexpr const char* kOp = "batch_isend_irecv";
    if (ops.empty()) return {};
    std::size_t bytes = 0;
    for (const P2POp& op : ops) {
      check_message(op.tensor, op.peer, op.tag, op.kind == P2POp::Kind::Recv, kOp, true);
      bytes += op.tensor.nbytes();
    }
    auto done = issue(messages_, fmt::format("{} ({} messages, {} bytes)", kOp, ops.size(), bytes),
                      [&](ncclComm_t c, cudaStream_t s) {
                        ncclResult_t status = ncclGroupStart();
                        if (status != ncclSuccess) return status;
                        for (const P2POp& op : ops) {
                          void* data = op.tensor.raw_data();
                          const ncclDataType_t type = nccl_type(op.tensor.dtype());
                          status = op.kind == P2POp::Kind::Send ? ncclSend(data, count(op.tensor), type, op.peer, c, s)
                                                                : ncclRecv(data, count(op.tensor), type, op.peer, c, s);
                          if (status != ncclSuccess) break;
                        }
                        const ncclResult_t end = ncclGroupEnd();  // also after a failed call: the group must close
                        return status != ncclSuccess ? status : end;
                      });
    std::vector<WorkPtr> works;
    works.reserve(ops.size());
    for (const P2POp& op : ops) {
      if (op.kind == P2POp::Kind::Send) works.push_back(std::make_shared<NcclWork>(done, compute_, messages_.watchdog));
      else works.push_back(std::make_shared<NcclRecvWork>(op.peer, op.tag, done, compute_, messages_.watchdog));
    }
    return works;
  }

  // An all-reduce of one value that the host waits for: every rank has queued everything
  // before it. The watchdog bounds the wait.
  void barrier() override {
    cuda::DeviceGuard guard(device_);
    if (!token_.defined()) token_ = Tensor::zeros({1}, {DType::i32, Device::cuda(device_)});
    all_reduce(token_);
    DTRAIN_CUDA_CHECK(cudaStreamSynchronize(compute_));
    rethrow_failure();
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    DTRAIN_CHECK(color >= 0, "split: color must be >= 0, got {}", color);
    rethrow_failure();
    cuda::DeviceGuard guard(device_);
    // Every rank of the parent must be done queueing on it: ncclCommSplit is collective.
    ncclComm_t child = split_within_deadline(collectives_, color, key, fmt::format("split (color {})", color));
    return std::make_shared<NcclCommunicator>(child, device_, options_);
  }

 private:
  static std::size_t count(const Tensor& t) { return static_cast<std::size_t>(t.numel()); }

  // ncclCommSplit of `parent`'s communicator, under the deadline that ncclCommInitRank has
  // (it waits for every rank of the parent). The split's thread holds the watchdog, which
  // owns the parent's communicator, for as long as it runs.
  ncclComm_t split_within_deadline(const Lane& parent, int color, int key, const std::string& what) const {
    struct Split {
      ncclComm_t child = nullptr;
      ncclResult_t status = ncclSuccess;
    };
    auto split = std::make_shared<Split>();
    run_with_deadline(fmt::format("rank {}: ncclCommSplit for {}", rank_, what), "all ranks", options_.timeout,
                      options_.on_timeout, [split, watchdog = parent.watchdog, color, key, device = device_] {
                        cuda::DeviceGuard on_device(device);
                        split->status = watchdog->with_comm(
                            [&](ncclComm_t comm) { return ncclCommSplit(comm, color, key, &split->child, nullptr); });
                      });
    if (split->status != ncclSuccess) nccl::throw_error(split->status, "ncclCommSplit", nullptr);
    return split->child;
  }

  // Either lane's failure makes the whole communicator unusable.
  void rethrow_failure() const {
    collectives_.watchdog->rethrow_async_error();
    messages_.watchdog->rethrow_async_error();
  }

  void check_gpu_buffer(const Tensor& t, const char* op, const char* what = "tensor") const {
    check_buffer(t, op, what);
    DTRAIN_CHECK(t.device() == Device::cuda(device_),
                 "{}: this NCCL communicator is on cuda:{}, got a {} on {} (move it with .to(Device::cuda({})))", op,
                 device_, what, t.device().str(), device_);
  }

  void check_message(const Tensor& t, int peer, int tag, bool receive, const char* op, bool in_batch) const {
    check_gpu_buffer(t, op);
    DTRAIN_CHECK(!(receive && peer == kAnySource),
                 "{}: NCCL has no receive from any source (kAnySource): receive from a named rank, or let the sender "
                 "announce itself first over an MPI communicator (dist::world(), CPU tensors), which has one",
                 op);
    check_peer(peer, rank_, size_, op, receive ? "src" : "dst", {.self_allowed = in_batch});
    check_tag(tag, op, receive && !in_batch);
  }

  WorkPtr post_send(const Tensor& t, int dst, int tag, const char* op) {
    check_message(t, dst, tag, false, op, false);
    return work(messages_, fmt::format("{} to rank {} ({} bytes)", op, dst, t.nbytes()),
                [&](ncclComm_t c, cudaStream_t s) {
                  return ncclSend(t.raw_data(), count(t), nccl_type(t.dtype()), dst, c, s);
                });
  }

  RecvWorkPtr post_recv(const Tensor& t, int src, int tag, const char* op) {
    check_message(t, src, tag, true, op, false);
    auto done = issue(messages_, fmt::format("{} from rank {} ({} bytes)", op, src, t.nbytes()),
                      [&](ncclComm_t c, cudaStream_t s) {
                        return ncclRecv(t.raw_data(), count(t), nccl_type(t.dtype()), src, c, s);
                      });
    return std::make_shared<NcclRecvWork>(src, tag, std::move(done), compute_, messages_.watchdog);
  }

  // Steps 1-3 of the file comment on `lane`; `call` queues the NCCL operation on its
  // communicator and stream. Returns the `done` event.
  template <class Call>
  std::shared_ptr<nccl::Event> issue(Lane& lane, std::string what, Call&& call) {
    // A failure of the other lane fails this one too; with_comm checks this lane's own.
    (&lane == &collectives_ ? messages_ : collectives_).watchdog->rethrow_async_error();
    cuda::DeviceGuard guard(device_);
    DTRAIN_CUDA_CHECK(cudaEventRecord(compute_ready_, compute_));
    DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(lane.stream, compute_ready_, 0));
    DTRAIN_NCCL_CHECK(lane.watchdog->with_comm([&](ncclComm_t comm) { return call(comm, lane.stream); }), nullptr);
    auto done = std::make_shared<nccl::Event>();
    DTRAIN_CUDA_CHECK(cudaEventRecord(done->get(), lane.stream));
    lane.watchdog->track(std::move(what), done);
    return done;
  }

  template <class Call>
  WorkPtr work(Lane& lane, std::string what, Call&& call) {
    auto done = issue(lane, std::move(what), std::forward<Call>(call));
    return std::make_shared<NcclWork>(std::move(done), compute_, lane.watchdog);
  }

  int device_;
  CommunicatorOptions options_;
  Lane collectives_;
  Lane messages_;
  int rank_ = 0;
  int size_ = 1;
  cudaStream_t compute_ = nullptr;  // the device's tensor ops (not ours to destroy)
  cudaEvent_t compute_ready_ = nullptr;
  Tensor token_;  // barrier()'s one value
};

}  // namespace

bool nccl_built() { return true; }

CommunicatorPtr nccl_communicator(const CommunicatorPtr& bootstrap, Device device, const CommunicatorOptions& options) {
  DTRAIN_CHECK(bootstrap != nullptr, "nccl_communicator: the bootstrap communicator must be given");
  DTRAIN_CHECK(device.is_cuda(), "nccl_communicator: expected a CUDA device, got {}", device.str());
  DTRAIN_CHECK(cuda::available(), "nccl_communicator: {}", cuda::unavailable_reason());
  DTRAIN_CHECK(device.index < cuda::device_count(), "nccl_communicator: {} requested, this machine has {} device(s)",
               device.str(), cuda::device_count());
  const CommunicatorOptions resolved = detail::with_environment(options);
  cuda::DeviceGuard guard(device.index);
  device_stream(device);  // creates the device's backend (and context) before NCCL uses it

  // Rank 0 makes the id; byte 0 says whether it could, so that a failure there becomes
  // the same error on every rank instead of a hang or a garbage id.
  constexpr std::size_t kIdBytes = sizeof(ncclUniqueId);
  Tensor message = Tensor::zeros({static_cast<std::int64_t>(kIdBytes + 1)}, {DType::u8});
  std::string failure;
  if (bootstrap->rank() == 0) {
    ncclUniqueId id;
    const ncclResult_t status = ncclGetUniqueId(&id);
    if (status == ncclSuccess) {
      message.data<std::uint8_t>()[0] = 1;
      std::memcpy(message.data<std::uint8_t>() + 1, &id, kIdBytes);
    } else {
      failure = ncclGetErrorString(status);
    }
  }
  bootstrap->broadcast(message, 0);
  DTRAIN_CHECK(message.data<std::uint8_t>()[0] == 1, "nccl_communicator: rank 0 could not create NCCL's unique id{}{}",
               failure.empty() ? "" : ": ", failure);
  ncclUniqueId id;
  std::memcpy(&id, message.data<std::uint8_t>() + 1, kIdBytes);

  // Every rank must come: under a deadline, since a rank that failed before this call
  // would otherwise leave the others blocked in it for ever.
  struct Init {
    ncclComm_t comm = nullptr;
    ncclResult_t status = ncclSuccess;
  };
  auto init = std::make_shared<Init>();
  const int size = bootstrap->size(), rank = bootstrap->rank();
  run_with_deadline(fmt::format("rank {}: ncclCommInitRank ({} ranks)", rank, size), "all ranks", resolved.timeout,
                    resolved.on_timeout, [init, size, id, rank, index = device.index] {
                      cuda::DeviceGuard on_device(index);  // this thread's first CUDA call
                      init->status = ncclCommInitRank(&init->comm, size, id, rank);
                    });
  if (init->status != ncclSuccess) {
    if (init->comm != nullptr) ncclCommAbort(init->comm);
    nccl::throw_error(init->status, "ncclCommInitRank", nullptr);
  }
  auto nccl = std::make_shared<NcclCommunicator>(init->comm, device.index, resolved);
  if (!resolved.check_collectives || bootstrap->size() == 1) return nccl;
  // The records go over the host (a split of the bootstrap), so checking waits for no GPU.
  return std::make_shared<CheckedCommunicator>(nccl, bootstrap->split(0, bootstrap->rank()), "nccl");
}

}  // namespace dtrain::dist
