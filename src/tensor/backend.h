// The device backend interface: one abstract class, one method per primitive, grouped
// by kind. The public ops (ops_*.cpp) validate arguments, allocate outputs and forward
// here; a backend may assume validated arguments:
// - tensors are defined, on this backend's device, with the dtypes the op allows;
// - element-wise inputs are already expanded (stride-0 broadcast) to the output's shape;
// - outputs are freshly allocated and contiguous unless a method says otherwise.
#pragma once

#include "dtrain/tensor/fused_attention.h"
#include "dtrain/tensor/memory_stats.h"
#include "dtrain/tensor/ops.h"
#include "dtrain/tensor/tensor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace dtrain::detail {

// In-place updates (self contiguous; a, b expanded to self's shape or undefined).
enum class UpdateOp : std::uint8_t {
  AddScaled,  // self += value * a
  MulScalar,  // self *= value
  Mul,        // self *= a
  AddCMul,    // self += value * a * b
  AddCDiv,    // self += value * a / b
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- memory ----------------------------------------------------------------
  virtual void* allocate(std::size_t nbytes) = 0;
  virtual void deallocate(void* ptr, std::size_t nbytes) = 0;
  // The counts of the blocks allocate() hands out: see dtrain/tensor/memory_stats.h.
  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak_memory() = 0;
  // dst = src element by element; same shape, any strides, dtype converted.
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // Contiguous transfers between this device and host memory (nbytes each).
  virtual void copy_to_host(const void* device_src, void* host_dst, std::size_t nbytes) = 0;
  virtual void copy_from_host(const void* host_src, void* device_dst, std::size_t nbytes) = 0;
  // From pinned host memory, without waiting: `keep_alive` owns host_src and is released
  // once the copy is done. By default (the CPU) a plain copy.
  virtual void copy_from_host_async(const void* host_src, void* device_dst, std::size_t nbytes,
                                    std::shared_ptr<const void> keep_alive) {
    copy_from_host(host_src, device_dst, nbytes);
  }
  // The same on a copy stream of the device's own: the copy waits for the work queued so
  // far (so device_dst is free), then runs beside the work queued after it. Returns the
  // copy's completion event, which wait_for() must see before anything reads device_dst.
  // By default (the CPU) a plain copy, and no event.
  virtual std::shared_ptr<void> copy_from_host_beside(const void* host_src, void* device_dst, std::size_t nbytes,
                                                      std::shared_ptr<const void> keep_alive) {
    copy_from_host(host_src, device_dst, nbytes);
    return nullptr;
  }
  // Orders this backend's work after `event` (one copy_from_host_beside returned) without
  // blocking the host.
  virtual void wait_for(const std::shared_ptr<void>& event) {}
  virtual void fill(Tensor& dst, double value) = 0;  // dst may be strided
  // The queue this backend's work runs on (a cudaStream_t); nullptr when work is done on
  // return, as on the CPU. See dtrain/tensor/stream.h.
  virtual void* stream() { return nullptr; }
  // Returns when the work queued so far is done.
  virtual void synchronize() {}

  // ---- element-wise ------------------------------------------------------------
  virtual void unary(UnaryOp op, const Tensor& x, Tensor& out) = 0;
  // out may alias a or b exactly (same storage, offset and strides).
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void compare(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out) = 0;  // out u8
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void update(UpdateOp op, Tensor& self, const Tensor& a, const Tensor& b, double value) = 0;
  // sgd_momentum_step_ (ops.h): param and buf contiguous, grad expanded to their shape and
  // sharing storage with neither. The default runs it as update() passes.
  virtual void sgd_momentum_step(Tensor& param, Tensor& buf, const Tensor& grad, const SgdMomentumStep& step);
  // adam_step_ (ops.h), on the same terms. The default runs it as update() passes.
  virtual void adam_step(Tensor& param, Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& grad, const AdamStep& step);

  // ---- reductions ----------------------------------------------------------------
  // dims sorted, unique, non-negative; out has x's rank with size 1 on reduced dims.
  virtual void reduce(ReduceOp op, const Tensor& x, const std::vector<std::int64_t>& dims, Tensor& out) = 0;
  // squared_norm (ops.h): an f64 scalar on x's device. The default squares an f64 copy.
  virtual Tensor squared_norm(const Tensor& x);
  // softmax_cross_entropy_rows_ (ops.h), arguments checked; sums and log_prob (N, 1) allocated.
  // The default composes the element-wise, reduction and indexing primitives.
  virtual void softmax_cross_entropy_rows(Tensor& logits, const Tensor& targets, Tensor& sums, Tensor& log_prob);
  virtual void argmax(const Tensor& x, std::int64_t dim, Tensor& out) = 0;  // out i64, keepdim shape

  // ---- linear algebra --------------------------------------------------------------
  // a (B,m,k), b (B,k,n), any strides (b may have batch stride 0); out (B,m,n) contiguous.
  virtual void matmul(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // out += a @ b with the same shapes (matmul_add_ in ops.h). The default multiplies into a
  // temporary and adds it.
  virtual void matmul_add(const Tensor& a, const Tensor& b, Tensor& out);

  // ---- convolution and pooling -------------------------------------------------------
  virtual void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, Tensor& out) = 0;
  virtual void conv2d_backward_input(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p,
                                     Tensor& grad_x) = 0;  // grad_x uninitialized: write all of it
  virtual void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p,
                                      Tensor& grad_w) = 0;  // grad_w uninitialized: write all of it
  virtual void max_pool2d(const Tensor& x, const Pool2dParams& p, Tensor& out, Tensor& indices) = 0;
  virtual void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices,
                                   Tensor& grad_x) = 0;  // grad_x uninitialized: write all of it
  virtual void avg_pool2d(const Tensor& x, const Pool2dParams& p, Tensor& out) = 0;
  virtual void avg_pool2d_backward(const Tensor& grad_out, const Pool2dParams& p, Tensor& grad_x) = 0;
  virtual void adaptive_avg_pool2d(const Tensor& x, Tensor& out) = 0;
  virtual void adaptive_avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x) = 0;

  // ---- batch normalization (contiguous x viewed as (N, C, S); gamma/beta may be undefined)
  // relu: y = max(0, the normalized x). relu_y: the output of a forward with relu, whose
  // gradient passes where relu_y > 0, or undefined for a forward without.
  virtual void batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, bool relu, Tensor& y,
                          Tensor& mean, Tensor& var) = 0;
  virtual void batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& relu_y, const Tensor& mean,
                                   const Tensor& var, const Tensor& gamma, double eps, Tensor& grad_x,
                                   Tensor& grad_gamma, Tensor& grad_beta) = 0;

  // ---- RMS normalization (contiguous x viewed as (rows, D); weight (D) or undefined) ----
  // rstd: one value per row. grad_weight is undefined when weight is: skip it.
  virtual void rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd) = 0;
  virtual void rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                                 Tensor& grad_x, Tensor& grad_weight) = 0;

  // ---- layer normalization (contiguous x viewed as (rows, D); weight, bias (D) or undefined) ----
  // mean, rstd: one value per row. grad_weight / grad_bias are undefined when not wanted: skip them.
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                          Tensor& mean, Tensor& rstd) = 0;
  virtual void layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) = 0;

  // ---- rotary position embedding (rope_forward in ops.h) -----------------------------
  // x contiguous (B, T, H, D); cos and sin contiguous (T, D / 2). inverse: rotate by -sin
  // (the backward).
  virtual void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse, Tensor& out) = 0;

  // ---- fused attention (fused_attention.h) ----------------------------------------------
  // q, k, v with a contiguous last dim; out and the gradients (B, T, heads, D) contiguous
  // memory seen as (B, heads, T, D); lse (B, H, T) contiguous. The default throws: only
  // backends that say has_fused_attention() for the dtype and head size get called.
  virtual bool has_fused_attention(DType dtype, std::int64_t head_dim) const { return false; }
  virtual void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FusedAttentionOptions& o,
                                 Tensor& out, Tensor& lse);
  virtual void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const FusedAttentionOptions& o, Tensor& grad_q,
                                  Tensor& grad_k, Tensor& grad_v);

  // ---- softmax family ------------------------------------------------------------------
  virtual void softmax(const Tensor& x, std::int64_t dim, bool log, Tensor& out) = 0;
  virtual void softmax_backward(const Tensor& grad_out, const Tensor& y, std::int64_t dim, bool log,
                                Tensor& grad_x) = 0;

  // ---- indexing, joining ------------------------------------------------------------
  virtual void index_select(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) = 0;
  virtual void index_add(std::int64_t dim, const Tensor& index, const Tensor& src, Tensor& out) = 0;
  virtual void gather(const Tensor& x, std::int64_t dim, const Tensor& index, Tensor& out) = 0;
  virtual void scatter_add(std::int64_t dim, const Tensor& index, const Tensor& src, Tensor& out) = 0;
  virtual void cat(const std::vector<Tensor>& inputs, std::int64_t dim, Tensor& out) = 0;

  // ---- random ---------------------------------------------------------------------------
  // Element i of dst (row-major) uses Philox counter offset + i: independent of threads.
  virtual void uniform(Tensor& dst, double low, double high, std::uint64_t seed, std::uint64_t offset) = 0;
  virtual void normal(Tensor& dst, double mean, double stddev, std::uint64_t seed, std::uint64_t offset) = 0;
  virtual void bernoulli(Tensor& dst, double p, std::uint64_t seed, std::uint64_t offset) = 0;
};

// The backend of `device`; throws dtrain::Error naming the device when it has none.
Backend& backend(Device device);
// Called by each backend's translation unit; the CPU backend is always present.
Backend& cpu_backend();
// The backend of CUDA device `index` (src/tensor/cuda/), created on first use; throws
// dtrain::Error naming the device and the reason when there is none: no CUDA in this
// build (src/tensor/nocuda/), no driver or device, or an index past the device count.
Backend& cuda_backend(int index);

// Page-locked host memory (src/tensor/cuda/pinned_memory.cpp), cached like device memory;
// allocating throws in a build or on a machine without CUDA.
void* pinned_allocate(std::size_t nbytes);
void pinned_deallocate(void* ptr, std::size_t nbytes);

}  // namespace dtrain::detail
