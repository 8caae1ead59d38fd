// The CUDA backend of one device. Its methods are defined across src/tensor/cuda/:
// memory.cpp (allocation, host transfers, asynchronous uploads from pinned memory),
// elementwise.cu (copy, fill and the element-wise primitives), reduce.cu, matmul.cpp
// (cuBLAS), cudnn_conv.cpp (cuDNN convolutions), pool.cu, batch_norm.cu, layer_norm.cu, rms_norm.cu, rope.cu, flash_attention.cu, softmax.cu,
// index.cu and random.cu; registry.cpp creates one per device, and pinned_memory.cpp
// serves the page-locked host memory all devices share.
//
// One stream per device: every kernel and copy of this backend is queued on its stream, in
// the order the host issued it. That is what makes the caching allocator safe without
// events: a block freed on the host while kernels that use it are still queued can go to
// the next allocation at once, because any use of it by the new owner is queued behind
// those kernels on the same stream. Work on another stream must be ordered with this one
// before its blocks can be freed: the NCCL communicator's Work::wait() makes this stream
// wait for the collective's event (src/comm/cuda/).
#pragma once

#include "tensor/backend.h"
#include "tensor/caching_allocator.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>

// The libraries' opaque handle types (cublasHandle_t, cudnnHandle_t are pointers to
// these), so that this header needs neither library's headers.
struct cublasContext;
struct cudnnContext;

namespace dtrain::detail {

struct ConvLibrary;  // cudnn_conv.cpp

// The first out-of-range index an indexing kernel met since the last synchronization
// (index.cu). It lives in mapped page-locked host memory, written by one device thread and
// read by the host only after the stream has finished, so no copy is needed to look at it.
struct IndexFault {
  int raised;  // 0, or 1 once a kernel filled the fields below
  int op;      // which op: index.cu's kIndexOpNames
  long long value;
  long long size;
};

// Where indexing kernels report (index.cu): `pending` (device memory) gathers the lowest bad
// position of one launch, and a one-thread kernel moves it into `fault` if no earlier launch
// faulted. The host looks at `fault` after each of its waits for the stream (copies to and
// from the host, synchronize) and throws the op's message there.
struct IndexCheck {
  IndexFault* fault = nullptr;            // mapped host memory
  IndexFault* fault_on_device = nullptr;  // the same memory, as the device sees it
  unsigned long long* pending = nullptr;  // device memory
};

class CudaBackend final : public Backend {
 public:
  // Creates the device's stream (and so its context). Never destroyed: see cuda_backend().
  explicit CudaBackend(int device);
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  void* allocate(std::size_t nbytes) override;
  void deallocate(void* ptr, std::size_t nbytes) override;
  MemoryStats memory_stats() const override;
  void reset_peak_memory() override;
  void copy(const Tensor& src, Tensor& dst) override;
  void copy_to_host(const void* device_src, void* host_dst, std::size_t nbytes) override;
  void copy_from_host(const void* host_src, void* device_dst, std::size_t nbytes) override;
  void copy_from_host_async(const void* host_src, void* device_dst, std::size_t nbytes,
                            std::shared_ptr<const void> keep_alive) override;
  std::shared_ptr<void> copy_from_host_beside(const void* host_src, void* device_dst, std::size_t nbytes,
                                              std::shared_ptr<const void> keep_alive) override;
  void wait_for(const std::shared_ptr<void>& event) override;
  void fill(Tensor& dst, double value) override;
  void* stream() override { return stream_; }
  void synchronize() override;

  void unary(UnaryOp op, const Tensor& x, Tensor& out) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void compare(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) override;
  void update(UpdateOp op, Tensor& self, const Tensor& a, const Tensor& b, double value) override;

  void reduce(ReduceOp op, const Tensor& x, const std::vector<std::int64_t>& dims, Tensor& out) override;
  void argmax(const Tensor& x, std::int64_t dim, Tensor& out) override;

  void matmul(const Tensor& a, const Tensor& b, Tensor& out) override;
  void matmul_add(const Tensor& a, const Tensor& b, Tensor& out) override;  // cuBLAS with beta 1

  void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, Tensor& out) override;
  void conv2d_backward_input(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, Tensor& grad_x) override;
  void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p, Tensor& grad_w) override;
  void max_pool2d(const Tensor& x, const Pool2dParams& p, Tensor& out, Tensor& indices) override;
  void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, Tensor& grad_x) override;
  void avg_pool2d(const Tensor& x, const Pool2dParams& p, Tensor& out) override;
  void avg_pool2d_backward(const Tensor& grad_out, const Pool2dParams& p, Tensor& grad_x) override;
  void adaptive_avg_pool2d(const Tensor& x, Tensor& out) override;
  void adaptive_avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x) override;

  void batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, bool relu, Tensor& y,
                  Tensor& mean, Tensor& var) override;
  void batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& relu_y, const Tensor& mean,
                           const Tensor& var, const Tensor& gamma, double eps, Tensor& grad_x, Tensor& grad_gamma,
                           Tensor& grad_beta) override;

  void rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd) override;
  void rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                         Tensor& grad_x, Tensor& grad_weight) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y, Tensor& mean,
                  Tensor& rstd) override;
  void layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                           const Tensor& weight, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) override;
  void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse, Tensor& out) override;

  // flash_attention.cu: f32 and f64, head sizes whose tiles fit the device's shared memory.
  bool has_fused_attention(DType dtype, std::int64_t head_dim) const override;
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FusedAttentionOptions& o, Tensor& out,
                         Tensor& lse) override;
  void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const FusedAttentionOptions& o, Tensor& grad_q, Tensor& grad_k,
                          Tensor& grad_v) override;

  void softmax(const Tensor& x, std::int64_t dim, bool log, Tensor& out) override;
  void softmax_backward(const Tensor& grad_out, const Tensor& y, std::int64_t dim, bool log, Tensor& grad_x) override;

  void index_select(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) override;
  void index_add(std::int64_t dim, const Tensor& index, const Tensor& src, Tensor& out) override;
  void gather(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) override;
  void scatter_add(std::int64_t dim, const Tensor& index, const Tensor& src, Tensor& out) override;
  void cat(const std::vector<Tensor>& inputs, std::int64_t dim, Tensor& out) override;

  void uniform(Tensor& dst, double low, double high, std::uint64_t seed, std::uint64_t offset) override;
  void normal(Tensor& dst, double mean, double stddev, std::uint64_t seed, std::uint64_t offset) override;
  void bernoulli(Tensor& dst, double p, std::uint64_t seed, std::uint64_t offset) override;

 private:
  // cuBLAS and cuDNN, each set up on first use (loading cuDNN costs seconds and memory
  // that a program without convolutions should not pay), bound to stream_ and with
  // workspace from cache_; never destroyed, like the backend. Callers hold a DeviceGuard.
  cublasContext* blas();  // matmul.cpp
  // out = (or += with `accumulate`) a @ b: matmul and matmul_add (matmul.cpp).
  void gemm(const Tensor& a, const Tensor& b, Tensor& out, bool accumulate);
  ConvLibrary& conv_library();  // cudnn_conv.cpp

  // Indexing ops check their indices on the device without waiting for it (index.cu);
  // see IndexCheck. Set up on first use.
  const IndexCheck& index_check();  // index.cu
  // Throws the fault an indexing kernel recorded, if any, and clears it. Callers have
  // just waited for stream_.
  void raise_index_fault();  // index.cu

  int device_;
  cudaStream_t stream_ = nullptr;
  // The device's opt-in shared memory per block, read on the first has_fused_attention() call
  // (flash_attention.cu) rather than on every attention op; -1 until then.
  mutable std::atomic<int> shared_per_block_{-1};
  // The stream of copy_from_host_beside (memory.cpp), created on first use.
  cudaStream_t copy_stream();
  std::once_flag copy_once_;
  cudaStream_t copy_stream_ = nullptr;
  // Asynchronous uploads in flight: each source's owner, released once its event has
  // completed (checked at the next upload and at synchronize()).
  struct PendingUpload {
    std::shared_ptr<CUevent_st> done;
    std::shared_ptr<const void> source;
  };
  // Queues the upload on `on`, returns its completion event; the source stays owned until then.
  std::shared_ptr<CUevent_st> queue_upload(const void* host_src, void* device_dst, std::size_t nbytes,
                                           std::shared_ptr<const void> keep_alive, cudaStream_t on);
  void release_finished_uploads(bool wait);
  std::mutex uploads_mutex_;
  std::deque<PendingUpload> uploads_;
  CachingAllocator cache_;
  std::once_flag index_once_;
  IndexCheck index_check_;
  std::atomic<IndexFault*> index_fault_{nullptr};  // index_check_.fault, once set up
  std::once_flag blas_once_, conv_once_;
  cublasContext* blas_ = nullptr;
  ConvLibrary* conv_ = nullptr;
};

}  // namespace dtrain::detail
