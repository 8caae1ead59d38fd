// The compressed gradient exchanges (gradient_exchange.h) at any world size (1, 2, 4 ranks):
// - fp16/bf16: the bucket goes through 16 bits (a value that 16 bits cannot hold comes back
//   rounded), the result is the mean to 16-bit precision, the same on every rank, and an
//   inf (a loss scaler's overflow) survives;
// - powersgd: every step equals a float64 computation of the algorithm (warm-up mean, P = MQ
//   summed, Gram-Schmidt, Q = M^T P averaged, P Q^T, error feedback carried over 3 steps)
//   to 2e-5, from every rank's gradients, which each rank computes for all;
// - each trains an MLP under DataParallel about as far as the plain mean, the replicas equal.
#include "dist/data_parallel/powersgd_exchange.h"
#include "dtrain/dist/data_parallel/data_parallel.h"
#include "dtrain/dist/data_parallel/gradient_exchange.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/sgd.h"
#include "support/test_support.h"

#include <cmath>
#include <limits>
#include <vector>

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

// One bucket of the given members, laid out one after another.
dist::BucketLayout layout(const std::vector<std::pair<std::string, Shape>>& members) {
  dist::BucketLayout b;
  for (const auto& [name, shape] : members) {
    b.members.push_back({name, shape, b.numel});
    b.numel += shape_numel(shape);
  }
  return b;
}

// Rank r's gradient at `step`, different per rank and step and of full rank as a matrix.
std::vector<double> gradient(int rank, int step, std::int64_t n) {
  std::vector<double> g(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    g[static_cast<std::size_t>(i)] = std::sin(0.37 * static_cast<double>(i) + 1.3 * rank + 0.7 * step) +
                                     0.1 * static_cast<double>(rank - step) +
                                     0.3 * std::cos(0.013 * static_cast<double>(i * i) + rank);
  }
  return g;
}

using Mat = std::vector<double>;  // row-major

Mat multiply(const Mat& a, const Mat& b, std::int64_t n, std::int64_t k, std::int64_t m, bool ta = false,
             bool tb = false) {  // (n x k) @ (k x m), with a or b given transposed
  Mat c(static_cast<std::size_t>(n * m), 0.0);
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (std::int64_t l = 0; l < k; ++l) {
        s += (ta ? a[l * n + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * m + j]);
      }
      c[static_cast<std::size_t>(i * m + j)] = s;
    }
  }
  return c;
}

void gram_schmidt(Mat& p, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t j = 0; j < cols; ++j) {
    for (std::int64_t i = 0; i < j; ++i) {
      double dot = 0;
      for (std::int64_t r = 0; r < rows; ++r) dot += p[r * cols + i] * p[r * cols + j];
      for (std::int64_t r = 0; r < rows; ++r) p[r * cols + j] -= dot * p[r * cols + i];
    }
    double norm = 0;
    for (std::int64_t r = 0; r < rows; ++r) norm += p[r * cols + j] * p[r * cols + j];
    for (std::int64_t r = 0; r < rows; ++r) p[r * cols + j] /= std::sqrt(norm);
  }
}

struct Trained {
  double first_loss = 0, last_loss = 0;  // the mean over the ranks
  double replica_difference = 0;
};

// `steps` SGD steps of an MLP under DataParallel with `exchange`.
Trained train(const std::string& exchange, int steps) {
  auto world = dist::world();
  manual_seed(5);
  auto model = nn::mlp(16, {32, 32}, 4);
  dist::DataParallel ddp(model, world, {.bucket_bytes = 4096, .gradient_exchange = exchange});
  optim::SGD sgd(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  const Tensor x = test::random_tensor({8, 16}, 100 + static_cast<std::uint64_t>(world->rank()));
  const Tensor y = Tensor::from_vector<std::int64_t>({0, 1, 2, 3, 3, 2, 1, 0}, {8});
  Trained out;
  for (int step = 0; step < steps; ++step) {
    sgd.zero_grad();
    Variable l = cross_entropy(ddp.forward(Variable(x)), y);
    l.backward();
    ddp.finish_gradient_sync();
    sgd.step();
    (step == 0 ? out.first_loss : out.last_loss) = l.data().item();
  }
  Tensor losses = Tensor::from_vector<double>({out.first_loss, out.last_loss}, {2});
  world->all_reduce(losses, dist::ReduceOp::Mean);
  out.first_loss = losses.to_vector<double>()[0];
  out.last_loss = losses.to_vector<double>()[1];
  out.replica_difference = ddp.check_replicas();
  return out;
}

}  // namespace

TEST_CASE("fp16 and bf16 exchanges go through 16 bits and keep an overflow", "[cpu][dist]") {
  auto world = dist::world();
  const int n = world->size();
  for (const char* kind : {"fp16", "bf16"}) {
    INFO(kind);
    auto exchange = dist::make_gradient_exchange(kind, world);
    CHECK(exchange->name() == kind);
    exchange->plan({layout({{"w", {4, 8}}, {"b", {5}}})});
    std::vector<double> mine = gradient(world->rank(), 0, 37);
    // Every rank's share of this element (the value / n) is 1 + 2^-12, which needs 13 bits of
    // mantissa: 16 bits round each share to 1, so the mean comes back as n, not n + n 2^-12.
    mine[3] = (1.0 + std::ldexp(1.0, -12)) * n;
    mine[4] = world->rank() == 0 ? std::numeric_limits<double>::infinity() : 1.0;
    Tensor buffer = Tensor::from_vector(mine, {37}).to(DType::f32);
    exchange->start(0, buffer)->wait();
    std::vector<float> got = buffer.to_vector<float>();
    Tensor reference = Tensor::from_vector(got, {37});
    world->broadcast(reference, 0);
    CHECK(got[3] == static_cast<float>(n));
    CHECK(std::isinf(got[4]));
    CHECK(got == reference.to_vector<float>());  // every rank the same
    const double precision = std::string(kind) == "fp16" ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    for (std::int64_t i = 0; i < 37; ++i) {
      if (i == 3 || i == 4) continue;
      double mean = 0;
      for (int r = 0; r < n; ++r) mean += gradient(r, 0, 37)[static_cast<std::size_t>(i)] / n;
      INFO("element " << i);
      CHECK(std::abs(got[static_cast<std::size_t>(i)] - mean) <= precision * (n + 1) * 2);
    }
  }
}

TEST_CASE("powersgd equals its float64 reference over warm-up and 3 compressed steps", "[cpu][dist]") {
  auto world = dist::world();
  const int n = world->size();
  constexpr int kRank = 2;
  // Compressed at rank 2 where 2 x rank x (rows + cols) <= rows x cols: w1 (88 <= 120) and
  // w4 (100 <= 144); b, w2 (28 > 12) and w3 (4 x 16: 80 > 64) go as they are.
  const dist::BucketLayout bucket =
      layout({{"w1", {12, 10}}, {"b", {7}}, {"w2", {3, 4}}, {"w3", {4, 4, 2, 2}}, {"w4", {16, 9}}});
  REQUIRE(dist::powersgd_matrix({12, 10}, kRank).rows == 12);
  REQUIRE(dist::powersgd_matrix({3, 4}, kRank).rows == 0);
  REQUIRE(dist::powersgd_matrix({4, 4, 2, 2}, kRank).rows == 0);  // 2*2*20 = 80 > 64
  REQUIRE(dist::powersgd_matrix({16, 9}, kRank).cols == 9);
  auto exchange = dist::make_gradient_exchange("powersgd:2:1", world);
  exchange->plan({bucket});

  struct Ref {
    std::int64_t offset, rows, cols;
    Mat q;
    std::vector<Mat> error;  // per rank
  };
  std::vector<Ref> refs;
  std::size_t k = 0;
  for (const auto& m : bucket.members) {
    const dist::MatrixShape s = dist::powersgd_matrix(m.shape, kRank);
    if (s.rows == 0) continue;
    Tensor q0 = dist::powersgd_initial_q(0, k++, s.cols, kRank, Device::cpu());
    refs.push_back(
        {m.offset, s.rows, s.cols, q0.to_vector<double>(),
         std::vector<Mat>(static_cast<std::size_t>(n), Mat(static_cast<std::size_t>(s.rows * s.cols), 0.0))});
  }
  REQUIRE(refs.size() == 2);

  for (int step = 0; step < 4; ++step) {
    Tensor buffer = Tensor::from_vector(gradient(world->rank(), step, bucket.numel), {bucket.numel}).to(DType::f32);
    exchange->start(0, buffer)->wait();
    const std::vector<double> got = buffer.to_vector<double>();

    // The reference: every element starts as the plain mean (the warm-up step, and the
    // uncompressed members); compressed matrices are then replaced.
    std::vector<Mat> grads;
    for (int r = 0; r < n; ++r) grads.push_back(gradient(r, step, bucket.numel));
    Mat expected(static_cast<std::size_t>(bucket.numel), 0.0);
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += grads[static_cast<std::size_t>(r)][i] / n;
    }
    if (step >= 1) {
      for (Ref& ref : refs) {
        const std::int64_t size = ref.rows * ref.cols;
        std::vector<Mat> ms;
        Mat p(static_cast<std::size_t>(ref.rows * kRank), 0.0);
        for (int r = 0; r < n; ++r) {
          Mat m(grads[static_cast<std::size_t>(r)].begin() + ref.offset,
                grads[static_cast<std::size_t>(r)].begin() + ref.offset + size);
          for (std::int64_t i = 0; i < size; ++i) m[i] += ref.error[static_cast<std::size_t>(r)][i];
          const Mat pr = multiply(m, ref.q, ref.rows, ref.cols, kRank);
          for (std::size_t i = 0; i < p.size(); ++i) p[i] += pr[i];
          ms.push_back(m);
        }
        gram_schmidt(p, ref.rows, kRank);
        Mat q(static_cast<std::size_t>(ref.cols * kRank), 0.0);
        for (int r = 0; r < n; ++r) {
          const Mat qr = multiply(ms[static_cast<std::size_t>(r)], p, ref.cols, ref.rows, kRank, /*ta=*/true);
          for (std::size_t i = 0; i < q.size(); ++i) q[i] += qr[i] / n;
        }
        const Mat approx = multiply(p, q, ref.rows, kRank, ref.cols, false, /*tb=*/true);
        for (int r = 0; r < n; ++r) {
          for (std::int64_t i = 0; i < size; ++i) {
            ref.error[static_cast<std::size_t>(r)][i] = ms[static_cast<std::size_t>(r)][i] - approx[i];
          }
        }
        std::copy(approx.begin(), approx.end(), expected.begin() + ref.offset);
        ref.q = q;
      }
    }
    double worst = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) worst = std::max(worst, std::abs(got[i] - expected[i]));
    INFO("step " << step);
    CHECK(worst <= 2e-5);
    if (step >= 1) {
      // Compression did something: the compressed matrices are not the plain mean.
      double off_mean = 0;
      for (std::int64_t i = 0; i < refs[0].rows * refs[0].cols; ++i) {
        double mean = 0;
        for (int r = 0; r < n; ++r) mean += grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] / n;
        off_mean = std::max(off_mean, std::abs(got[static_cast<std::size_t>(i)] - mean));
      }
      CHECK(off_mean > 1e-3);
    }
  }
}

TEST_CASE("compressed exchanges train under DataParallel with equal replicas", "[cpu][dist]") {
  const Trained plain = train("all_reduce", 20);
  CHECK(plain.replica_difference == 0);
  CHECK(plain.last_loss < plain.first_loss - 0.1);
  for (const char* kind : {"fp16", "bf16", "powersgd:2:5"}) {
    INFO(kind);
    const Trained t = train(kind, 20);
    CHECK(t.replica_difference == 0);
    CHECK(t.first_loss == plain.first_loss);
    // At least 80% of the plain exchange's progress.
    CHECK(t.first_loss - t.last_loss >= 0.8 * (plain.first_loss - plain.last_loss));
  }
}

TEST_CASE("compressed exchange options are checked, naming the text", "[cpu][dist]") {
  auto world = dist::world();
  CHECK_THROWS_WITH(dist::make_gradient_exchange("powersgd", world), Contains("'powersgd': needs a rank"));
  CHECK_THROWS_WITH(dist::make_gradient_exchange("powersgd:0", world),
                    Contains("'powersgd:0': RANK must be an integer >= 1, got '0'"));
  CHECK_THROWS_WITH(dist::make_gradient_exchange("powersgd:4:x", world),
                    Contains("'powersgd:4:x': WARMUP_STEPS must be an integer >= 0, got 'x'"));
  CHECK_THROWS_WITH(dist::make_gradient_exchange("bf16:2", world), Contains("'bf16:2': bf16 takes no options"));
  CHECK(dist::parse_powersgd_options("4").warmup_steps == 100);
  CHECK(dist::parse_powersgd_options("8:0").rank == 8);
}
