// The CPU backend. Its methods are defined across src/tensor/cpu/*.cpp, one file per
// kind of primitive (memory.cpp, copy_fill.cpp, unary.cpp, binary.cpp, compare_where.cpp, update.cpp, reduce.cpp,
// matmul.cpp, conv.cpp, pool.cpp, batch_norm.cpp, layer_norm.cpp, rms_norm.cpp, rope.cpp, softmax.cpp, index.cpp,
// random.cpp).
#pragma once

#include "tensor/backend.h"

namespace dtrain::detail {

class CpuBackend final : public Backend {
 public:
  void* allocate(std::size_t nbytes) override;
  void deallocate(void* ptr, std::size_t nbytes) override;
  MemoryStats memory_stats() const override;
  void reset_peak_memory() override;
  void copy(const Tensor& src, Tensor& dst) override;
  void copy_to_host(const void* device_src, void* host_dst, std::size_t nbytes) override;
  void copy_from_host(const void* host_src, void* device_dst, std::size_t nbytes) override;
  void fill(Tensor& dst, double value) override;

  void unary(UnaryOp op, const Tensor& x, Tensor& out) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void compare(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) override;
  void update(UpdateOp op, Tensor& self, const Tensor& a, const Tensor& b, double value) override;
  void sgd_momentum_step(Tensor& param, Tensor& buf, const Tensor& grad, const SgdMomentumStep& step) override;
  void adam_step(Tensor& param, Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& grad, const AdamStep& step) override;
  Tensor squared_norm(const Tensor& x) override;
  void softmax_cross_entropy_rows(Tensor& logits, const Tensor& targets, Tensor& sums, Tensor& log_prob) override;
  bool has_fused_attention(DType dtype, std::int64_t) const override {
    return dtype == DType::f32 || dtype == DType::f64;
  }
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FusedAttentionOptions& o, Tensor& out,
                         Tensor& lse) override;
  void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const FusedAttentionOptions& o, Tensor& grad_q, Tensor& grad_k,
                          Tensor& grad_v) override;

  void reduce(ReduceOp op, const Tensor& x, const std::vector<std::int64_t>& dims, Tensor& out) override;
  void argmax(const Tensor& x, std::int64_t dim, Tensor& out) override;

  void matmul(const Tensor& a, const Tensor& b, Tensor& out) override;
  void matmul_add(const Tensor& a, const Tensor& b, Tensor& out) override;  // f32 and f64 in the GEMM

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
};

}  // namespace dtrain::detail
