// Random ops. Each call reserves one Philox counter per element from its generator and
// hands (seed, first counter) to the backend, so a generator state fixes the values
// whatever the thread count or device, and consecutive calls never reuse counters.
#include "dtrain/tensor/ops.h"

#include "tensor/backend.h"
#include "tensor/philox.h"

#include <mutex>
#include <utility>

namespace dtrain {
namespace {

// Serializes counter reservations: data-loader threads and the training thread may draw
// from the same generator.
std::mutex& generator_mutex() {
  static std::mutex m;
  return m;
}

// Reserves n counters of `gen` (the default generator when null): {seed, first counter}.
std::pair<std::uint64_t, std::uint64_t> reserve(Generator* gen, std::int64_t n) {
  std::lock_guard lock(generator_mutex());
  Generator& g = gen ? *gen : default_generator();
  return {g.seed(), g.advance(static_cast<std::uint64_t>(n))};
}

// Runs fill(backend, dst, seed, offset) on t, through a contiguous buffer when t is strided
// (the backend numbers elements in row-major order of a contiguous dst).
template <class Fill>
Tensor& fill_random(Tensor& t, Generator* gen, Fill fill) {
  auto [seed, offset] = reserve(gen, t.numel());
  detail::Backend& be = detail::backend(t.device());
  if (t.is_contiguous()) {
    fill(be, t, seed, offset);
  } else {
    Tensor staged = Tensor::empty(t.shape(), t.options());
    fill(be, staged, seed, offset);
    t.copy_(staged);
  }
  return t;
}

void check_floating(const Tensor& t, const char* op) {
  check_defined(t, op);
  DTRAIN_CHECK(is_floating(t.dtype()), "{}: expected a floating tensor (f32, f64), got {}", op, dtype_name(t.dtype()));
}

}  // namespace

Generator& default_generator() {
  static Generator gen(0);  // fixed default seed: runs are reproducible unless reseeded
  return gen;
}

void manual_seed(std::uint64_t seed) {
  std::lock_guard lock(generator_mutex());
  default_generator().set_state(seed, 0);
}

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  check_floating(t, "uniform_");
  DTRAIN_CHECK(low <= high, "uniform_: expected low <= high, got [{}, {})", low, high);
  return fill_random(t, gen, [&](detail::Backend& be, Tensor& dst, std::uint64_t seed, std::uint64_t offset) {
    be.uniform(dst, low, high, seed, offset);
  });
}

Tensor& normal_(Tensor& t, double mean, double stddev, Generator* gen) {
  check_floating(t, "normal_");
  DTRAIN_CHECK(stddev >= 0, "normal_: expected stddev >= 0, got {}", stddev);
  return fill_random(t, gen, [&](detail::Backend& be, Tensor& dst, std::uint64_t seed, std::uint64_t offset) {
    be.normal(dst, mean, stddev, seed, offset);
  });
}

Tensor& bernoulli_(Tensor& t, double p, Generator* gen) {
  check_defined(t, "bernoulli_");
  DTRAIN_CHECK(p >= 0 && p <= 1, "bernoulli_: expected a probability in [0, 1], got {}", p);
  return fill_random(t, gen, [&](detail::Backend& be, Tensor& dst, std::uint64_t seed, std::uint64_t offset) {
    be.bernoulli(dst, p, seed, offset);
  });
}

// Fisher-Yates: step i swaps position i with one drawn uniformly from [0, i], using
// counter offset + i (the modulo bias, below n / 2^64, is negligible).
Tensor randperm(std::int64_t n, Generator* gen) {
  DTRAIN_CHECK(n >= 0, "randperm: expected n >= 0, got {}", n);
  auto [seed, offset] = reserve(gen, n);
  Tensor out = Tensor::empty({n}, {DType::i64, Device::cpu()});
  std::int64_t* p = out.data<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) p[i] = i;
  for (std::int64_t i = n - 1; i > 0; --i) {
    detail::PhiloxBlock r = detail::philox4x32_10(offset + static_cast<std::uint64_t>(i), seed);
    std::uint64_t bits = static_cast<std::uint64_t>(r.v[1]) << 32 | r.v[0];
    auto j = static_cast<std::int64_t>(bits % static_cast<std::uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return out;
}

}  // namespace dtrain
