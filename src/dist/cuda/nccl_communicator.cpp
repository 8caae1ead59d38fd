// The NCCL backend (see dtrain/dist/nccl.h for the contract). Each operation:
//   1. the communication stream waits for the compute stream (an event), so NCCL reads
//      what the kernels queued before it wrote;
//   2. the NCCL call is queued on the communication stream;
//   3. a `done` event is recorded after it and handed to the watchdog and to the Work;
//   4. Work::wait() makes the compute stream wait for `done`.
// Blocking operations are the same followed by wait(). Nothing blocks the host except
// barrier(), which is its job.
#include "dist/cuda/nccl_watchdog.h"
#include "dist/collective_checks.h"
#include "dist/communicator_options.h"
#include "dtrain/core/environment.h"
#include "dtrain/dist/nccl.h"
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
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  DTRAIN_FAIL("nccl: unknown reduce op {}", static_cast<int>(op));
}

// Makes the compute stream wait for one operation's `done` event.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<nccl::Event> done, cudaStream_t compute, std::shared_ptr<nccl::Watchdog> watchdog)
      : done_(std::move(done)), compute_(compute), watchdog_(std::move(watchdog)) {}
  void wait() override {
    watchdog_->rethrow_async_error();
    DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_->get(), 0));
  }
  // A Work dropped without wait() still orders the compute stream after the operation:
  // otherwise its tensor's block could go back to the cache and to a kernel while NCCL
  // still uses it. (Waiting twice on one event costs nothing; a destructor cannot throw.)
  ~NcclWork() override { cudaStreamWaitEvent(compute_, done_->get(), 0); }

 private:
  std::shared_ptr<nccl::Event> done_;
  cudaStream_t compute_;
  std::shared_ptr<nccl::Watchdog> watchdog_;
};

class NcclCommunicator final : public Communicator {
 public:
  // Owns `comm` from here on (the watchdog destroys it, also when this throws).
  NcclCommunicator(ncclComm_t comm, int device, const CommunicatorOptions& options)
      : device_(device), options_(options), watchdog_(std::make_shared<nccl::Watchdog>(comm, device, options.timeout)) {
    cuda::DeviceGuard guard(device_);
    rank_ = watchdog_->rank();
    size_ = watchdog_->size();
    // The highest priority: a gradient bucket's all-reduce should not queue behind the
    // rest of backward's kernels. (Numerically lower is higher.)
    int least = 0, greatest = 0;
    DTRAIN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    DTRAIN_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
    compute_ = static_cast<cudaStream_t>(device_stream(Device::cuda(device_)));
    DTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
  }

  // Waits for the operations in flight (a communicator is destroyed between steps, not
  // inside one); the watchdog then destroys the NCCL communicator once no Work holds it.
  // A destructor must not throw: failures are ignored.
  ~NcclCommunicator() override {
    // Raw calls, errors ignored: DeviceGuard throws, and a destructor must not.
    int previous = -1;
    const bool switched =
        cudaGetDevice(&previous) == cudaSuccess && previous != device_ && cudaSetDevice(device_) == cudaSuccess;
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (compute_ready_ != nullptr) cudaEventDestroy(compute_ready_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (switched) cudaSetDevice(previous);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  WorkPtr all_reduce_async(Tensor& t, ReduceOp op) override {
    check_gpu_buffer(t, "all_reduce");
    check_reduction(t, op, "all_reduce");
    return enqueue(fmt::format("all_reduce ({}, {} bytes)", reduce_op_name(op), t.nbytes()), [&](ncclComm_t c) {
      return ncclAllReduce(t.raw_data(), t.raw_data(), count(t), nccl_type(t.dtype()), nccl_op(op), c, stream_);
    });
  }

  void broadcast(Tensor& t, int root) override {
    check_gpu_buffer(t, "broadcast");
    check_rank(root, size_, "broadcast", "root");
    enqueue(fmt::format("broadcast from rank {} ({} bytes)", root, t.nbytes()), [&](ncclComm_t c) {
      return ncclBroadcast(t.raw_data(), t.raw_data(), count(t), nccl_type(t.dtype()), root, c, stream_);
    })->wait();
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    check_gpu_buffer(in, "all_gather", "in");
    check_gpu_buffer(out, "all_gather", "out");
    check_gather_shapes(in, out, size_, "all_gather");
    enqueue(fmt::format("all_gather ({} bytes per rank)", in.nbytes()), [&](ncclComm_t c) {
      return ncclAllGather(in.raw_data(), out.raw_data(), count(in), nccl_type(in.dtype()), c, stream_);
    })->wait();
  }

  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    check_gpu_buffer(in, "reduce_scatter", "in");
    check_gpu_buffer(out, "reduce_scatter", "out");
    check_scatter_shapes(in, out, size_, "reduce_scatter");
    check_reduction(in, op, "reduce_scatter");
    enqueue(fmt::format("reduce_scatter ({}, {} bytes per rank)", reduce_op_name(op), out.nbytes()),
            [&](ncclComm_t c) {
              return ncclReduceScatter(in.raw_data(), out.raw_data(), count(out), nccl_type(in.dtype()), nccl_op(op),
                                       c, stream_);
            })
        ->wait();
  }

  void send(const Tensor& t, int dst, int /*tag: see nccl.h*/) override {
    check_gpu_buffer(t, "send");
    check_peer(dst, "send", "dst");
    enqueue(fmt::format("send to rank {} ({} bytes)", dst, t.nbytes()), [&](ncclComm_t c) {
      return ncclSend(t.raw_data(), count(t), nccl_type(t.dtype()), dst, c, stream_);
    })->wait();
  }

  void recv(Tensor& t, int src, int /*tag: see nccl.h*/) override {
    check_gpu_buffer(t, "recv");
    check_peer(src, "recv", "src");
    enqueue(fmt::format("recv from rank {} ({} bytes)", src, t.nbytes()), [&](ncclComm_t c) {
      return ncclRecv(t.raw_data(), count(t), nccl_type(t.dtype()), src, c, stream_);
    })->wait();
  }

  // An all-reduce of one value that the host waits for: every rank has queued everything
  // before it. The watchdog bounds the wait.
  void barrier() override {
    cuda::DeviceGuard guard(device_);
    if (!token_.defined()) token_ = Tensor::zeros({1}, {DType::i32, Device::cuda(device_)});
    all_reduce(token_);
    DTRAIN_CUDA_CHECK(cudaStreamSynchronize(compute_));
    watchdog_->rethrow_async_error();
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    DTRAIN_CHECK(color >= 0, "split: color must be >= 0, got {}", color);
    watchdog_->rethrow_async_error();
    cuda::DeviceGuard guard(device_);
    // Every rank of the parent must be done queueing on it: ncclCommSplit is collective.
    ncclComm_t child = nullptr;
    DTRAIN_NCCL_CHECK(ncclCommSplit(watchdog_->comm(), color, key, &child, nullptr), watchdog_->comm());
    return std::make_shared<NcclCommunicator>(child, device_, options_);
  }

 private:
  static std::size_t count(const Tensor& t) { return static_cast<std::size_t>(t.numel()); }

  void check_gpu_buffer(const Tensor& t, const char* op, const char* what = "tensor") const {
    check_buffer(t, op, what);
    DTRAIN_CHECK(t.device() == Device::cuda(device_),
                 "{}: this NCCL communicator is on cuda:{}, got a {} on {} (move it with .to(Device::cuda({})))", op,
                 device_, what, t.device().str(), device_);
  }

  void check_peer(int peer, const char* op, const char* role) const {
    check_rank(peer, size_, op, role);
    DTRAIN_CHECK(peer != rank_, "{}: {} {} is this rank itself", op, role, peer);
  }

  // Steps 1-3 of the file comment; `call` queues the NCCL operation on stream_.
  template <class Call>
  WorkPtr enqueue(std::string what, Call&& call) {
    watchdog_->rethrow_async_error();
    cuda::DeviceGuard guard(device_);
    DTRAIN_CUDA_CHECK(cudaEventRecord(compute_ready_, compute_));
    DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_ready_, 0));
    ncclComm_t comm = watchdog_->comm();
    DTRAIN_NCCL_CHECK(call(comm), comm);
    auto done = std::make_shared<nccl::Event>();
    DTRAIN_CUDA_CHECK(cudaEventRecord(done->get(), stream_));
    watchdog_->track(std::move(what), done);
    return std::make_shared<NcclWork>(std::move(done), compute_, watchdog_);
  }

  int device_;
  CommunicatorOptions options_;
  std::shared_ptr<nccl::Watchdog> watchdog_;  // owns the ncclComm_t
  int rank_ = 0;
  int size_ = 1;
  cudaStream_t stream_ = nullptr;   // NCCL's
  cudaStream_t compute_ = nullptr;  // the device's tensor ops (not ours to destroy)
  cudaEvent_t compute_ready_ = nullptr;
  Tensor token_;                              // barrier()'s one value
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

  ncclComm_t comm = nullptr;
  if (const ncclResult_t status = ncclCommInitRank(&comm, bootstrap->size(), id, bootstrap->rank());
      status != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    nccl::throw_error(status, "ncclCommInitRank", nullptr);
  }
  return std::make_shared<NcclCommunicator>(comm, device.index, resolved);
}

}  // namespace dtrain::dist
