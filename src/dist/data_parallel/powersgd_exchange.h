// The "powersgd" gradient exchange (gradient_exchange.h): PowerSGD (Vogels, Karimireddy and
// Jaggi 2019, "PowerSGD: Practical Low-Rank Gradient Compression for Distributed
// Optimization"), laid out as PyTorch's powerSGD_hook.
//
// Per bucket and step, after `warmup_steps` plain all-reduces:
//   each compressed matrix M (a weight's gradient as rows x cols, rows = its first
//   dimension) first takes the error left from its previous step: M = gradient + E (kept
//   in E's buffer);
//   P = M Q (rows x rank), with Q from the previous step (warm start; seeded normal values,
//   the same on every rank, the first time); P summed over the replicas, together with the
//   uncompressed members (one all-reduce);
//   P's columns orthonormalized (modified Gram-Schmidt, in double, on the host);
//   Q = M^T P summed over the replicas and divided by their count (the second all-reduce);
//   the gradient becomes P Q^T, and E = M - P Q^T is kept for the next step.
// A matrix is compressed when rank x (rows + cols) is at most half of rows x cols (PyTorch's
// min_compression_rate 2); other members are averaged as they are. The first all-reduce
// runs while backward goes on; the second runs when the reducer waits for the bucket.
#pragma once

#include "dtrain/dist/data_parallel/gradient_exchange.h"

#include <string_view>

namespace dtrain::dist {

struct PowerSgdOptions {
  int rank = 4;
  int warmup_steps = 100;  // plain all-reduces before compressing (per bucket)
};

// "R" or "R:W" (rank, warmup steps); throws naming the text otherwise.
PowerSgdOptions parse_powersgd_options(std::string_view text);
GradientExchangePtr make_powersgd_exchange(const CommunicatorPtr& replicas, const PowerSgdOptions& options);

// Which bucket members are compressed at `rank`: rows and cols of the matrix, or {0, 0}.
struct MatrixShape {
  std::int64_t rows = 0, cols = 0;
};
MatrixShape powersgd_matrix(const Shape& shape, int rank);

// The first Q of the matrix `matrix` (counted over the compressed members in bucket order)
// of bucket `bucket`: cols x rank normal values, the same on every rank.
Tensor powersgd_initial_q(std::size_t bucket, std::size_t matrix, std::int64_t cols, int rank, Device device);

// Orthonormalizes the columns of p (rows x rank, contiguous, f32 or f64) in place by modified
// Gram-Schmidt in double; a column with nothing left becomes zero.
void orthonormalize_columns(Tensor& p);

}  // namespace dtrain::dist
