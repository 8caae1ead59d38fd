// CUDA indexing, joining and random fills against the CPU backend. Index ops run on both
// devices from the same inputs; a bad index must fail with the CPU's message and leave the
// device usable. The random fills must draw what the CPU draws from the same generator
// state: bit for bit for uniform and bernoulli, within a few ulp for normal.
#include "cuda_test.h"
#include "dtrain/autograd/functions.h"
#include "dtrain/tensor/stream.h"
#include "support/test_support.h"

#include <functional>
#include <string>
#include <vector>

namespace dtrain::test {
namespace {

using Fn = std::function<Tensor(const Tensor&, const Tensor&)>;

const std::vector<DType> kAllDtypes{DType::f32, DType::f64, DType::i64, DType::i32, DType::u8};

// Values in [-2, 2) as `dtype` (integers: the values times 10, truncated; negative ones
// wrap for u8 on both devices).
Tensor input(const Shape& shape, std::uint64_t seed, DType dtype) {
  Tensor t = random_tensor(shape, seed, DType::f64, -2, 2);
  return is_floating(dtype) ? t.to(dtype) : mul(t, 10.0).to(dtype);
}

// Indices drawn uniformly from [0, size), as `dtype` (i64 or i32).
Tensor indices(const Shape& shape, std::int64_t size, std::uint64_t seed, DType dtype = DType::i64) {
  return random_tensor(shape, seed, DType::f64, 0, static_cast<double>(size)).to(dtype);
}

// Exact, except for floating sums whose order differs (atomics, Box-Muller's math).
void require_matches(const Tensor& got, const Tensor& expected, double rtol = 0, double atol = 0) {
  REQUIRE(got.device() == kGpu);
  REQUIRE(got.dtype() == expected.dtype());
  require_close(got.to(Device::cpu()), expected, rtol, atol);
}

// fn(data, index) on both devices.
void check(const std::string& name, const Tensor& x, const Tensor& index, const Fn& fn, double rtol = 0,
           double atol = 0) {
  INFO("case: " << name);
  require_matches(fn(x.to(kGpu), index.to(kGpu)), fn(x, index), rtol, atol);
}

}  // namespace

TEST_CASE("CUDA index_select and gather, every dtype, both index dtypes", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dt : kAllDtypes) {
    const Tensor x = input({5, 6, 7}, 1, dt);
    for (DType it : {DType::i64, DType::i32}) {
      const std::string t = fmt::format("{} index {}", dtype_name(dt), dtype_name(it));
      for (std::int64_t d = 0; d < 3; ++d) {
        const Tensor idx = indices({9}, x.size(d), 10 + d, it);  // repeats included
        check(fmt::format("index_select dim {} {}", d, t), x, idx,
              [d](const Tensor& a, const Tensor& i) { return index_select(a, d, i); });
        Shape gshape = x.shape();
        gshape[d] = 4;
        check(fmt::format("gather dim {} {}", d, t), x, indices(gshape, x.size(d), 20 + d, it),
              [d](const Tensor& a, const Tensor& i) { return gather(a, d, i); });
      }
      check("index_select of a transposed " + t, x, indices({4}, 5, 30, it),
            [](const Tensor& a, const Tensor& i) { return index_select(a.transpose(0, 2), 2, i); });
      check("gather from a permuted " + t, x, indices({7, 5, 2}, 6, 31, it), [](const Tensor& a, const Tensor& i) {
        return gather(a.permute({2, 0, 1}), 2, i);
      });
    }
  }
  const Tensor x = input({5, 6}, 2, DType::f32);
  check("index_select with no indices", x, Tensor::zeros({0}, {DType::i64}),
        [](const Tensor& a, const Tensor& i) { return index_select(a, 0, i); });
  check("gather of an empty index", x, Tensor::zeros({5, 0}, {DType::i64}),
        [](const Tensor& a, const Tensor& i) { return gather(a, 1, i); });
  // An embedding lookup: many rows, several blocks.
  check("index_select of 50000 rows", input({1000, 64}, 3, DType::f32), indices({50000}, 1000, 32),
        [](const Tensor& a, const Tensor& i) { return index_select(a, 0, i); });
}

TEST_CASE("CUDA index_add and scatter_add with repeated indices", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dt : kAllDtypes) {
    // Floating sums of up to 9 terms in a different order.
    const double rtol = is_floating(dt) ? 1e-5 : 0, atol = is_floating(dt) ? 1e-5 : 0;
    for (DType it : {DType::i64, DType::i32}) {
      const std::string t = fmt::format("{} index {}", dtype_name(dt), dtype_name(it));
      const Shape shape{5, 6, 7};
      for (std::int64_t d = 0; d < 3; ++d) {
        Shape src_shape = shape;
        src_shape[d] = 9;
        const Tensor src = input(src_shape, 40 + d, dt);
        check(
            fmt::format("index_add dim {} {}", d, t), src, indices({9}, shape[d], 50 + d, it),
            [&, d](const Tensor& s, const Tensor& i) { return index_add(shape, d, i, s); }, rtol, atol);
        check(
            fmt::format("scatter_add dim {} {}", d, t), src, indices(src_shape, shape[d], 60 + d, it),
            [&, d](const Tensor& s, const Tensor& i) { return scatter_add(shape, d, i, s); }, rtol, atol);
      }
      check(
          "index_add of a transposed src " + t, input({7, 3}, 70, dt), indices({7}, 4, 71, it),
          [](const Tensor& s, const Tensor& i) {
            return index_add({3, 4}, 1, i, s.t());
          },
          rtol, atol);
    }
  }
  // An embedding's gradient: 20000 token rows into 100 rows, about 200 terms per element
  // summed in another order (f32 partial sums reach ~30, whose ulp is 2e-6).
  for (DType dt : {DType::f32, DType::f64, DType::i64}) {
    const double tol = dt == DType::f32 ? 5e-4 : dt == DType::f64 ? 1e-10 : 0;
    check(
        fmt::format("index_add of 20000 rows {}", dtype_name(dt)), input({20000, 64}, 72, dt),
        indices({20000}, 100, 73),
        [](const Tensor& s, const Tensor& i) {
          return index_add({100, 64}, 0, i, s);
        },
        tol, tol);
  }
  // The cross-entropy backward's one-hot: one index per row.
  check("scatter_add of a one-hot", Tensor::full({64, 1}, -0.9), indices({64, 1}, 10, 74),
        [](const Tensor& s, const Tensor& i) {
          return scatter_add({64, 10}, 1, i, s);
        });
  check("index_add with no indices", Tensor::zeros({3, 0}), Tensor::zeros({0}, {DType::i64}),
        [](const Tensor& s, const Tensor& i) {
          return index_add({3, 4}, 1, i, s);
        });
}

// The kernels check their indices without a host wait: the op returns, and the error comes
// at the next wait for the device (here, the copy to the host), with the CPU's message.
TEST_CASE("CUDA index ops reject out-of-range indices at the next synchronization", "[cuda]") {
  if (!cuda_ready()) return;
  using Catch::Matchers::Contains;
  const Device cpu = Device::cpu();
  for (DType it : {DType::i64, DType::i32}) {
    INFO("index dtype " << dtype_name(it));
    const Tensor x = input({5, 6}, 80, DType::f32).to(kGpu);
    // The first bad index in order is reported, as on the CPU.
    const Tensor bad = Tensor::from_vector<std::int64_t>({1, 9, -3}, {3}).to(it).to(kGpu);
    Tensor selected;
    REQUIRE_NOTHROW(selected = index_select(x, 0, bad));
    REQUIRE_THROWS_WITH(selected.to(cpu), Contains("index_select: index 9 is out of range for a dimension of size 5"));
    // Reported once: the next wait finds nothing.
    REQUIRE_NOTHROW(synchronize(kGpu));
    const Tensor rows = input({3, 6}, 81, DType::f32).to(kGpu);
    REQUIRE_THROWS_WITH(index_add({4, 6}, 0, bad, rows).to(cpu),
                        Contains("index_add: index 9 is out of range for a dimension of size 4"));
    const Tensor negative = Tensor::from_vector<std::int64_t>({0, -1, 2, 0, 1, 7}, {1, 6}).to(it).to(kGpu);
    REQUIRE_THROWS_WITH(gather(x, 0, negative).to(cpu),
                        Contains("gather: index -1 is out of range for a dimension of size 5"));
    REQUIRE_THROWS_WITH(scatter_add({2, 6}, 0, negative, input({1, 6}, 82, DType::f32).to(kGpu)).to(cpu),
                        Contains("scatter_add: index -1 is out of range for a dimension of size 2"));
    // Two faulting ops before one wait: the first op's error, and the second's is not kept.
    const Tensor first = gather(x, 0, negative);
    const Tensor second = index_select(x, 0, bad);
    REQUIRE_THROWS_WITH(synchronize(kGpu), Contains("gather: index -1"));
    REQUIRE_NOTHROW(second.to(cpu));
    // An op with no elements to compute still checks its indices, as on the CPU.
    const Tensor empty = index_select(Tensor::zeros({5, 0}).to(kGpu), 0, bad);
    REQUIRE(empty.numel() == 0);
    REQUIRE_THROWS_WITH(synchronize(kGpu), Contains("index_select: index 9 is out of range"));
    // Nothing was written out of bounds: the device still computes, and good elements of a
    // faulting gather are right (bad ones are 0).
    const Tensor ok = Tensor::from_vector<std::int64_t>({4, 0}, {2}).to(it);
    require_matches(index_select(x, 0, ok.to(kGpu)), index_select(x.to(cpu), 0, ok));
    REQUIRE(first.to(cpu).data<float>()[0] == x.to(cpu).data<float>()[0]);
    REQUIRE(first.to(cpu).data<float>()[1] == 0.0f);
  }
}

TEST_CASE("CUDA cat and stack of contiguous, strided and empty pieces", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dt : kAllDtypes) {
    const Tensor a = input({4, 3, 5}, 90, dt), b = input({4, 2, 5}, 91, dt), c = input({5, 2, 4}, 92, dt);
    const Tensor none = Tensor::zeros({4, 0, 5}, {dt});
    const std::vector<Tensor> host{a, b, c, none};
    auto on = [&](Device device) {
      std::vector<Tensor> t;
      for (const Tensor& h : host) t.push_back(h.to(device));
      return t;
    };
    auto cats = [](const std::vector<Tensor>& t) {
      return std::vector<Tensor>{cat({t[0], t[1], t[2].permute({2, 1, 0}), t[3]}, 1),
                                 cat({t[0], t[0].slice(2, 0, 5, 2)}, 2), cat({t[1], t[0].narrow(1, 0, 2)}, 0),
                                 stack({t[0], t[0]}, 3), cat({t[3], t[3]}, 1)};
    };
    const std::vector<Tensor> expected = cats(on(Device::cpu())), got = cats(on(kGpu));
    for (std::size_t i = 0; i < expected.size(); ++i) {
      INFO("cat case " << i << " " << dtype_name(dt));
      require_matches(got[i], expected[i]);
    }
  }
}

TEST_CASE("CUDA random fills draw the CPU's numbers from the same generator state", "[cuda]") {
  if (!cuda_ready()) return;
  // Two calls per generator, so that the second starts at a non-zero counter offset; an
  // odd size, several blocks.
  const Shape shape{1031, 259};
  using Fill = std::function<void(Tensor&, Generator&)>;
  auto compare = [&](const std::string& name, DType dt, const Fill& fill, double rtol, double atol) {
    INFO(name << " " << dtype_name(dt));
    Generator on_cpu(1234), on_gpu(1234);
    for (int call = 0; call < 2; ++call) {
      Tensor expected = Tensor::empty(shape, {dt}), got = Tensor::empty(shape, {dt, kGpu});
      fill(expected, on_cpu);
      fill(got, on_gpu);
      require_matches(got, expected, rtol, atol);
    }
    // A strided destination (staged through a contiguous buffer by the op).
    Tensor expected = Tensor::zeros({259, 1031}, {dt}), got = Tensor::zeros({259, 1031}, {dt, kGpu});
    Tensor expected_view = expected.t(), got_view = got.t();
    fill(expected_view, on_cpu);
    fill(got_view, on_gpu);
    require_matches(got, expected, rtol, atol);
  };
  for (DType dt : {DType::f32, DType::f64}) {
    // Bit for bit in a default build; one ulp of slack should the host compiler fuse
    // low + span * u into an fma (-march=native), which the device code never does.
    const double ulp = dt == DType::f32 ? 3e-7 : 1e-15;
    compare(
        "uniform_", dt, [](Tensor& t, Generator& g) { uniform_(t, -0.5, 2.0, &g); }, ulp, ulp);
    compare(
        "uniform_ of an empty interval", dt, [](Tensor& t, Generator& g) { uniform_(t, 3.0, 3.0, &g); }, 0, 0);
    // log and cos differ by a few ulp between the device's math library and glibc.
    const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
    compare(
        "normal_", dt, [](Tensor& t, Generator& g) { normal_(t, 1.0, 2.5, &g); }, tol, tol);
  }
  for (DType dt : kAllDtypes)
    compare(
        "bernoulli_", dt, [](Tensor& t, Generator& g) { bernoulli_(t, 0.3, &g); }, 0, 0);
  // Dropout draws its mask through bernoulli_ as well.
  Generator on_cpu(7), on_gpu(7);
  const Tensor x = input({64, 128}, 93, DType::f32);
  require_matches(dropout(Variable(x.to(kGpu)), 0.25, &on_gpu).data(), dropout(Variable(x), 0.25, &on_cpu).data(), 1e-6,
                  1e-6);
}

}  // namespace dtrain::test
