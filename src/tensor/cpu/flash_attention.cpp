// Fused attention on the CPU (fused_attention.h), FlashAttention's scheme with CPU-sized
// blocks: a block of 64 queries meets 256 keys at a time (scores 64 KB, in L2), an online
// softmax rescales the running output as each key block raises a row's maximum, and only
// the output and each row's log-sum-exp are kept. The backward recomputes each block's
// probabilities from the log-sum-exp and accumulates dQ per query block and dK, dV per
// key/value head. Causal masking skips every key block past a query block's last row.
//
// Threads: the forward splits (batch, head, query block) units; the backward splits
// (batch, key/value head) units, each owning its dK and dV rows (every query head of a
// grouped-query group adds into them in turn), so no thread writes another's memory and the
// result does not depend on the thread count. The products are oneDNN's single-thread
// sgemm (f32) or Eigen's (f64, the gradient checks); the exponentials are vector_exp.h's in
// per-instruction-set clones of the row loops.
#include "dtrain/core/parallel.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/isa_clones.h"
#include "tensor/cpu/onednn.h"
#include "tensor/cpu/vector_exp.h"

// Our pool owns the threads: keep Eigen sequential even if OpenMP is ever enabled.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include <cmath>
#include <limits>
#include <type_traits>

namespace dtrain::detail {
namespace {

constexpr std::int64_t kQueryBlock = 64;
constexpr std::int64_t kKeyBlock = 256;

// One head of a (B, heads, T, D) tensor whose last dim is contiguous: row t at data + t * stride.
template <class T>
struct Head {
  T* data;
  std::int64_t stride;
  T* row(std::int64_t t) const { return data + t * stride; }
};

template <class T>
Head<T> head_of(const Tensor& x, std::int64_t b, std::int64_t h) {
  return {const_cast<T*>(x.data<T>()) + b * x.stride(0) + h * x.stride(1), x.stride(2)};
}

// c(m, n) = op(a)(m, k) @ op(b)(k, n) (+ c when accumulate), row-major with leading dims.
template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t lda,
          const T* b, std::int64_t ldb, T* c, std::int64_t ldc, bool accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    onednn::sgemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate ? 1.0f : 0.0f);
  } else {
    using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using In = Eigen::Map<const Matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
    using Out = Eigen::Map<Matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
    const In A(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
    const In B(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
    Out C(c, m, n, Eigen::OuterStride<>(ldc));
    auto product = [&](const auto& x, const auto& y) {
      if (accumulate) C.noalias() += x * y;
      else C.noalias() = x * y;
    };
    if (trans_a && trans_b) product(A.transpose(), B.transpose());
    else if (trans_a) product(A.transpose(), B);
    else if (trans_b) product(A, B.transpose());
    else product(A, B);
  }
}

// Per-thread scratch from dtrain's allocator, so that memory_stats counts it.
template <class T>
class Scratch {
 public:
  explicit Scratch(std::int64_t n) : buffer_(static_cast<std::size_t>(n) * sizeof(T)) {}
  T* data() const { return static_cast<T*>(buffer_.data()); }
  T& operator[](std::int64_t i) const { return data()[i]; }

 private:
  onednn::Buffer buffer_;
};

template <class T>
[[gnu::always_inline]] inline T exp_of(T x) {
  if constexpr (std::is_same_v<T, float>) return cpu::vector_exp(x);
  else return std::exp(x);
}

// Largest of p[0, n), n >= 1; sixteen independent lanes so that the loop vectorizes.
template <class T>
DTRAIN_ISA_CLONES T row_max(const T* __restrict p, std::int64_t n) {
  constexpr std::int64_t kLanes = 16;
  T lanes[kLanes];
  for (std::int64_t j = 0; j < kLanes; ++j) lanes[j] = p[0];
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::int64_t j = 0; j < kLanes; ++j) lanes[j] = p[i + j] > lanes[j] ? p[i + j] : lanes[j];
  T m = p[0];
  for (std::int64_t j = 0; j < kLanes; ++j) m = lanes[j] > m ? lanes[j] : m;
  for (; i < n; ++i) m = p[i] > m ? p[i] : m;
  return m;
}

// p[j] = exp(p[j] * scale - shift) for j < n, and p[j] = 0 for n <= j < width (masked
// keys); returns the sum of the first n.
template <class T>
DTRAIN_ISA_CLONES T exp_row(T* __restrict p, std::int64_t n, std::int64_t width, T scale, T shift) {
  for (std::int64_t j = 0; j < n; ++j) p[j] = exp_of(p[j] * scale - shift);
  for (std::int64_t j = n; j < width; ++j) p[j] = 0;
  constexpr std::int64_t kLanes = 16;
  T lanes[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::int64_t j = 0; j < kLanes; ++j) lanes[j] = lanes[j] + p[i + j];
  T s = 0;
  for (std::int64_t j = 0; j < kLanes; ++j) s = s + lanes[j];
  for (; i < n; ++i) s = s + p[i];
  return s;
}

// dp[j] = p[j] * (dp[j] - delta) * scale: the scores' gradient from the probabilities'.
template <class T>
DTRAIN_ISA_CLONES void score_grad_row(T* __restrict dp, const T* __restrict p, std::int64_t n, T delta, T scale) {
  for (std::int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - delta) * scale;
}

template <class T>
DTRAIN_ISA_CLONES void scale_row(T* __restrict x, std::int64_t n, T s) {
  for (std::int64_t j = 0; j < n; ++j) x[j] = x[j] * s;
}

template <class T>
DTRAIN_ISA_CLONES T dot_row(const T* __restrict a, const T* __restrict b, std::int64_t n) {
  T s = 0;
  for (std::int64_t j = 0; j < n; ++j) s = s + a[j] * b[j];
  return s;
}

// Keys of [j0, j0 + cols) that query i may see.
std::int64_t visible(bool causal, std::int64_t i, std::int64_t j0, std::int64_t cols) {
  return causal ? std::clamp<std::int64_t>(i + 1 - j0, 0, cols) : cols;
}

struct Sizes {
  std::int64_t b, h, hkv, t, d, groups, query_blocks;
  explicit Sizes(const Tensor& q, const Tensor& k)
      : b(q.size(0)),
        h(q.size(1)),
        hkv(k.size(1)),
        t(q.size(2)),
        d(q.size(3)),
        groups(h / hkv),
        query_blocks((t + kQueryBlock - 1) / kQueryBlock) {}
};

template <class T>
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const FusedAttentionOptions& o, Tensor& out,
             Tensor& lse) {
  const Sizes n(q, k);
  const T scale = static_cast<T>(o.scale);
  T* lse_data = lse.data<T>();
  parallel_for(0, n.b * n.h * n.query_blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    const Scratch<T> scores(kQueryBlock * kKeyBlock), acc(kQueryBlock * n.d), running_max(kQueryBlock),
        running_sum(kQueryBlock);
    for (std::int64_t unit = begin; unit < end; ++unit) {
      const std::int64_t bh = unit / n.query_blocks, b = bh / n.h, h = bh % n.h;
      const std::int64_t i0 = (unit % n.query_blocks) * kQueryBlock, rows = std::min(kQueryBlock, n.t - i0);
      const Head<T> Q = head_of<T>(q, b, h), K = head_of<T>(k, b, h / n.groups), V = head_of<T>(v, b, h / n.groups);
      const Head<T> O = head_of<T>(out, b, h);
      std::fill(running_max.data(), running_max.data() + kQueryBlock, -std::numeric_limits<T>::infinity());
      std::fill(running_sum.data(), running_sum.data() + kQueryBlock, T(0));
      const std::int64_t key_end = o.causal ? i0 + rows : n.t;
      for (std::int64_t j0 = 0; j0 < key_end; j0 += kKeyBlock) {
        const std::int64_t cols = std::min(kKeyBlock, key_end - j0);
        gemm<T>(false, true, rows, cols, n.d, Q.row(i0), Q.stride, K.row(j0), K.stride, scores.data(), cols, false);
        for (std::int64_t r = 0; r < rows; ++r) {
          T* s = scores.data() + r * cols;
          const std::int64_t seen = visible(o.causal, i0 + r, j0, cols);
          if (seen == 0) {
            std::fill(s, s + cols, T(0));
            continue;
          }
          const T m = std::max(running_max[r], row_max(s, seen) * scale);
          const T alpha = running_sum[r] == 0 ? T(0) : exp_of(running_max[r] - m);
          const T added = exp_row(s, seen, cols, scale, m);
          running_sum[r] = running_sum[r] * alpha + added;
          running_max[r] = m;
          if (j0 > 0 && alpha != 1) scale_row(acc.data() + r * n.d, n.d, alpha);
        }
        gemm<T>(false, false, rows, n.d, cols, scores.data(), cols, V.row(j0), V.stride, acc.data(), n.d, j0 > 0);
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        T* o_row = O.row(i0 + r);
        const T inv = T(1) / running_sum[r];
        for (std::int64_t c = 0; c < n.d; ++c) o_row[c] = acc[r * n.d + c] * inv;
        lse_data[(b * n.h + h) * n.t + i0 + r] = running_max[r] + std::log(running_sum[r]);
      }
    }
  });
}

template <class T>
void backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const Tensor& lse, const FusedAttentionOptions& o, Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) {
  const Sizes n(q, k);
  const T scale = static_cast<T>(o.scale);
  const T* lse_data = lse.data<T>();
  parallel_for(0, n.b * n.hkv, 1, [&](std::int64_t begin, std::int64_t end) {
    const Scratch<T> probs(kQueryBlock * kKeyBlock), dprobs(kQueryBlock * kKeyBlock), delta(n.t);
    for (std::int64_t unit = begin; unit < end; ++unit) {
      const std::int64_t b = unit / n.hkv, hk = unit % n.hkv;
      const Head<T> K = head_of<T>(k, b, hk), V = head_of<T>(v, b, hk);
      const Head<T> dK = head_of<T>(grad_k, b, hk), dV = head_of<T>(grad_v, b, hk);
      for (std::int64_t t = 0; t < n.t; ++t) {
        std::fill(dK.row(t), dK.row(t) + n.d, T(0));
        std::fill(dV.row(t), dV.row(t) + n.d, T(0));
      }
      for (std::int64_t h = hk * n.groups; h < (hk + 1) * n.groups; ++h) {
        const Head<T> Q = head_of<T>(q, b, h), dO = head_of<T>(grad_out, b, h), O = head_of<T>(out, b, h);
        const Head<T> dQ = head_of<T>(grad_q, b, h);
        const T* row_lse = lse_data + (b * n.h + h) * n.t;
        // delta_i = sum_j P_ij dP_ij = dO_i . O_i: softmax's backward term, once per row.
        for (std::int64_t t = 0; t < n.t; ++t) delta[t] = dot_row(dO.row(t), O.row(t), n.d);
        for (std::int64_t i0 = 0; i0 < n.t; i0 += kQueryBlock) {
          const std::int64_t rows = std::min(kQueryBlock, n.t - i0);
          const std::int64_t key_end = o.causal ? i0 + rows : n.t;
          for (std::int64_t j0 = 0; j0 < key_end; j0 += kKeyBlock) {
            const std::int64_t cols = std::min(kKeyBlock, key_end - j0);
            gemm<T>(false, true, rows, cols, n.d, Q.row(i0), Q.stride, K.row(j0), K.stride, probs.data(), cols, false);
            for (std::int64_t r = 0; r < rows; ++r)
              exp_row(probs.data() + r * cols, visible(o.causal, i0 + r, j0, cols), cols, scale, row_lse[i0 + r]);
            gemm<T>(true, false, cols, n.d, rows, probs.data(), cols, dO.row(i0), dO.stride, dV.row(j0), dV.stride,
                    true);
            gemm<T>(false, true, rows, cols, n.d, dO.row(i0), dO.stride, V.row(j0), V.stride, dprobs.data(), cols,
                    false);
            for (std::int64_t r = 0; r < rows; ++r)
              score_grad_row(dprobs.data() + r * cols, probs.data() + r * cols, cols, delta[i0 + r], scale);
            gemm<T>(false, false, rows, n.d, cols, dprobs.data(), cols, K.row(j0), K.stride, dQ.row(i0), dQ.stride,
                    j0 > 0);
            gemm<T>(true, false, cols, n.d, rows, dprobs.data(), cols, Q.row(i0), Q.stride, dK.row(j0), dK.stride,
                    true);
          }
        }
      }
    }
  });
}

}  // namespace

void CpuBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FusedAttentionOptions& o,
                                   Tensor& out, Tensor& lse) {
  if (q.dtype() == DType::f32) return forward<float>(q, k, v, o, out, lse);
  DTRAIN_CHECK(q.dtype() == DType::f64, "attention_forward: no CPU kernel for {}", dtype_name(q.dtype()));
  forward<double>(q, k, v, o, out, lse);
}

void CpuBackend::attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const FusedAttentionOptions& o,
                                    Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) {
  if (q.dtype() == DType::f32) return backward<float>(grad_out, q, k, v, out, lse, o, grad_q, grad_k, grad_v);
  DTRAIN_CHECK(q.dtype() == DType::f64, "attention_backward: no CPU kernel for {}", dtype_name(q.dtype()));
  backward<double>(grad_out, q, k, v, out, lse, o, grad_q, grad_k, grad_v);
}

}  // namespace dtrain::detail
