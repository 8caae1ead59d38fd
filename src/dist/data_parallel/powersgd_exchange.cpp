#include "dist/data_parallel/powersgd_exchange.h"

#include "dtrain/core/error.h"

#include <fmt/format.h>

#include <charconv>
#include <map>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

namespace dtrain::dist {
namespace {

struct Matrix {
  std::string name;         // the parameter's
  std::int64_t offset = 0;  // in the bucket
  std::int64_t rows = 0, cols = 0;
  std::int64_t p_offset = 0, q_offset = 0;  // in the bucket's P and Q buffers
  Tensor q, error;                          // cols x rank (warm start); rows x cols
};

struct Plain {
  std::int64_t offset = 0, numel = 0;  // in the bucket
  std::int64_t packed = 0;             // in the bucket's P buffer, after the matrices' P
};

struct BucketState {
  std::vector<Matrix> matrices;
  std::vector<Plain> plain;
  std::int64_t p_numel = 0, q_numel = 0;
  Tensor p, q;   // the all-reduced buffers, allocated at the first compressed step
  Tensor share;  // 1 / replicas
  std::int64_t steps = 0;
};

int parse_int(std::string_view text, std::string_view whole, const char* what, int min) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  DTRAIN_CHECK(error == std::errc() && end == text.data() + text.size() && value >= min,
               "gradient exchange 'powersgd:{}': {} must be an integer >= {}, got '{}' (powersgd:RANK[:WARMUP_STEPS])",
               whole, what, min, text);
  return value;
}

Tensor matrix_view(const Tensor& flat, std::int64_t offset, std::int64_t rows, std::int64_t cols) {
  return flat.narrow(0, offset, rows * cols).view({rows, cols});
}

class PowerSgd final : public GradientExchange {
 public:
  PowerSgd(CommunicatorPtr replicas, PowerSgdOptions options) : replicas_(std::move(replicas)), options_(options) {}
  std::string name() const override { return "powersgd"; }

  void plan(const std::vector<BucketLayout>& buckets) override {
    buckets_.assign(buckets.size(), {});
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      BucketState& s = buckets_[b];
      for (const BucketLayout::Member& m : buckets[b].members) {
        const MatrixShape shape = powersgd_matrix(m.shape, options_.rank);
        if (shape.rows > 0 && is_floating(buckets[b].dtype) && !is_half(buckets[b].dtype)) {
          s.matrices.push_back({.name = m.name,
                                .offset = m.offset,
                                .rows = shape.rows,
                                .cols = shape.cols,
                                .p_offset = s.p_numel,
                                .q_offset = s.q_numel,
                                .q = {},
                                .error = {}});
          s.p_numel += shape.rows * options_.rank;
          s.q_numel += shape.cols * options_.rank;
        } else {
          s.plain.push_back({.offset = m.offset, .numel = shape_numel(m.shape), .packed = 0});
        }
      }
      for (Plain& p : s.plain) {
        p.packed = s.p_numel;
        s.p_numel += p.numel;
      }
    }
  }

  WorkPtr start(std::size_t index, Tensor& buffer) override {
    DTRAIN_CHECK(index < buckets_.size(), "powersgd: bucket {} was not planned ({} buckets)", index, buckets_.size());
    BucketState& s = buckets_[index];
    if (s.steps++ < options_.warmup_steps || s.matrices.empty()) {
      return replicas_->all_reduce_async(buffer, ReduceOp::Mean);
    }
    const Tensor flat = buffer.view({buffer.numel()});
    allocate(index, s, flat);
    for (Matrix& m : s.matrices) {
      // The error buffer becomes M = gradient + error (error feedback); the bucket's region
      // is free until the approximation lands there.
      binary_out(BinaryOp::Add, m.error, matrix_view(flat, m.offset, m.rows, m.cols), m.error);
      Tensor p = matrix_view(s.p, m.p_offset, m.rows, options_.rank);
      p.zero_();
      matmul_add_(p, m.error, m.q);
    }
    for (const Plain& plain : s.plain)
      s.p.narrow(0, plain.packed, plain.numel).copy_(flat.narrow(0, plain.offset, plain.numel));
    // The rest of the bucket's exchange, run by the reducer's wait.
    return then(replicas_->all_reduce_async(s.p, ReduceOp::Sum),
                [this, index, bucket = Tensor(flat)]() mutable { finish(index, bucket); });
  }

  // Per bucket "bucket<b>.steps"; per compressed matrix, once compressing has begun,
  // "<parameter>.powersgd_q" (the same on every rank) and "<parameter>.powersgd_error".
  std::vector<std::pair<std::string, Tensor>> state() const override {
    std::vector<std::pair<std::string, Tensor>> out;
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      const BucketState& s = buckets_[b];
      out.emplace_back(fmt::format("bucket{}.steps", b), Tensor::full({}, static_cast<double>(s.steps), {DType::i64}));
      for (const Matrix& m : s.matrices) {
        if (!m.q.defined()) continue;
        out.emplace_back(m.name + ".powersgd_q", m.q);
        out.emplace_back(m.name + ".powersgd_error", m.error);
      }
    }
    return out;
  }

  void load_state(const std::vector<std::pair<std::string, Tensor>>& state) override {
    std::map<std::string, Tensor, std::less<>> by_name(state.begin(), state.end());
    const auto take = [&](const std::string& name, const Shape& shape) -> Tensor {
      const auto it = by_name.find(name);
      DTRAIN_CHECK(it != by_name.end(), "powersgd: the saved state has no '{}' (saved with other buckets?)", name);
      DTRAIN_CHECK(it->second.shape() == shape, "powersgd: the saved '{}' has shape {}, expected {}", name,
                   shape_str(it->second.shape()), shape_str(shape));
      return it->second;
    };
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      BucketState& s = buckets_[b];
      s.steps = static_cast<std::int64_t>(take(fmt::format("bucket{}.steps", b), {}).item());
      for (Matrix& m : s.matrices) {
        if (!by_name.contains(m.name + ".powersgd_q")) continue;  // saved before compressing began
        m.q = take(m.name + ".powersgd_q", {m.cols, options_.rank}).clone();
        m.error = take(m.name + ".powersgd_error", {m.rows, m.cols}).clone();
      }
    }
  }

  // After P's sum: the uncompressed members' means, Q, its sum, and the approximations.
  void finish(std::size_t index, Tensor& flat) {
    BucketState& s = buckets_[index];
    for (const Plain& plain : s.plain) {
      Tensor out = flat.narrow(0, plain.offset, plain.numel);
      binary_out(BinaryOp::Mul, s.p.narrow(0, plain.packed, plain.numel), s.share, out);
    }
    for (Matrix& m : s.matrices) {
      Tensor p = matrix_view(s.p, m.p_offset, m.rows, options_.rank);
      orthonormalize_columns(p);
      Tensor q = matrix_view(s.q, m.q_offset, m.cols, options_.rank);
      q.zero_();
      matmul_add_(q, m.error, p, /*transpose_a=*/true);
    }
    replicas_->all_reduce(s.q, ReduceOp::Sum);
    binary_out(BinaryOp::Mul, s.q, s.share, s.q);
    for (Matrix& m : s.matrices) {
      const Tensor p = matrix_view(s.p, m.p_offset, m.rows, options_.rank);
      const Tensor q = matrix_view(s.q, m.q_offset, m.cols, options_.rank);
      m.q.copy_(q);  // the next step's start
      Tensor grad = matrix_view(flat, m.offset, m.rows, m.cols);
      grad.zero_();
      matmul_add_(grad, p, q, false, /*transpose_b=*/true);
      matmul_add_(m.error, neg(p), q, false, /*transpose_b=*/true);  // what P Q^T missed: M - P Q^T
    }
  }

 private:
  // The buffers, at the first compressed step; a loaded state moves to the bucket's device.
  void allocate(std::size_t index, BucketState& s, const Tensor& flat) {
    if (s.p.defined()) return;
    const TensorOptions like{flat.dtype(), flat.device()};
    s.p = Tensor::empty({s.p_numel}, like);
    s.q = Tensor::empty({s.q_numel}, like);
    s.share = Tensor::full({}, 1.0 / replicas_->size(), like);
    for (std::size_t k = 0; k < s.matrices.size(); ++k) {
      Matrix& m = s.matrices[k];
      if (m.q.defined()) {
        m.q = m.q.to(flat.device()).to(flat.dtype());
        m.error = m.error.to(flat.device()).to(flat.dtype());
      } else {
        m.q = powersgd_initial_q(index, k, m.cols, options_.rank, flat.device()).to(flat.dtype());
        m.error = Tensor::zeros({m.rows, m.cols}, like);
      }
    }
  }

  CommunicatorPtr replicas_;
  PowerSgdOptions options_;
  std::vector<BucketState> buckets_;
};

}  // namespace

PowerSgdOptions parse_powersgd_options(std::string_view text) {
  PowerSgdOptions o;
  DTRAIN_CHECK(!text.empty(),
               "gradient exchange 'powersgd': needs a rank (powersgd:RANK[:WARMUP_STEPS], e.g. powersgd:4)");
  const std::size_t colon = text.find(':');
  o.rank = parse_int(text.substr(0, colon), text, "RANK", 1);
  if (colon != std::string_view::npos) o.warmup_steps = parse_int(text.substr(colon + 1), text, "WARMUP_STEPS", 0);
  return o;
}

GradientExchangePtr make_powersgd_exchange(const CommunicatorPtr& replicas, const PowerSgdOptions& options) {
  return std::make_unique<PowerSgd>(replicas, options);
}

MatrixShape powersgd_matrix(const Shape& shape, int rank) {
  if (shape.size() < 2) return {};
  const std::int64_t rows = shape[0];
  const std::int64_t cols = rows > 0 ? shape_numel(shape) / rows : 0;
  if (rows == 0 || cols == 0 || 2 * rank * (rows + cols) > rows * cols) return {};
  return {rows, cols};
}

Tensor powersgd_initial_q(std::size_t bucket, std::size_t matrix, std::int64_t cols, int rank, Device device) {
  Generator gen(0x9e3779b97f4a7c15ULL ^ (bucket << 20) ^ matrix);
  Tensor q = Tensor::empty({cols, rank}, {DType::f32, Device::cpu()});
  normal_(q, 0, 1, &gen);
  return q.to(device);
}

void orthonormalize_columns(Tensor& p) {
  DTRAIN_CHECK(p.dim() == 2 && p.is_contiguous(), "orthonormalize_columns: expected a contiguous matrix, got {}",
               shape_str(p.shape()));
  Tensor host = p.to(Device::cpu()).to(DType::f64);
  const std::int64_t rows = p.shape()[0], cols = p.shape()[1];
  double* a = host.data<double>();
  auto at = [&](std::int64_t r, std::int64_t c) -> double& { return a[r * cols + c]; };
  for (std::int64_t j = 0; j < cols; ++j) {
    for (std::int64_t i = 0; i < j; ++i) {
      double dot = 0;
      for (std::int64_t r = 0; r < rows; ++r) dot += at(r, i) * at(r, j);
      for (std::int64_t r = 0; r < rows; ++r) at(r, j) -= dot * at(r, i);
    }
    double norm = 0;
    for (std::int64_t r = 0; r < rows; ++r) norm += at(r, j) * at(r, j);
    norm = std::sqrt(norm);
    for (std::int64_t r = 0; r < rows; ++r) at(r, j) = norm > 0 ? at(r, j) / norm : 0.0;
  }
  p.copy_(host);
}

}  // namespace dtrain::dist
