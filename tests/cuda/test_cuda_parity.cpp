// The backend-parity table (in the spirit of ggml's test-backend-ops): every element-wise
// case runs on the CPU and on CUDA from the same inputs, and the results must agree within
// the dtype's tolerance. A case is its inputs (CPU tensors, copied to the device as they
// are) and a function of them, so views (transposes, broadcasts, slices) are taken on each
// device and exercise the strided kernel.
#include "cuda_test.h"
#include "support/test_support.h"
#include "tensor/functors.h"

#include <functional>
#include <type_traits>
#include <string>
#include <vector>

namespace dtrain::test {
namespace {

using CaseFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Case {
  std::string name;
  std::vector<Tensor> inputs;
  CaseFn fn;
};

// Both backends evaluate the same functors, so the difference is the device's math library
// (a few ulp for exp, erfc, pow) and the compiler's contraction into fused multiply-adds.
void check_parity(const Case& c) {
  INFO("case: " << c.name);
  const Tensor expected = c.fn(c.inputs);
  std::vector<Tensor> on_gpu;
  for (const Tensor& t : c.inputs) on_gpu.push_back(t.to(kGpu));
  const Tensor got = c.fn(on_gpu);
  REQUIRE(got.device() == kGpu);
  REQUIRE(got.dtype() == expected.dtype());
  const Tensor back = got.to(Device::cpu());
  switch (expected.dtype()) {
    case DType::f32: require_close(back, expected, 1e-5, 1e-6); break;
    case DType::f64: require_close(back, expected, 1e-12, 1e-14); break;
    default: require_close(back, expected, 0, 0); break;
  }
}

// Values in [-2, 2), or in [0.25, 2.25) for ops defined on positive numbers, as `dtype`
// (integers: the values times 10, truncated; negative ones wrap for u8 on both devices).
Tensor input(const Shape& shape, std::uint64_t seed, DType dtype, bool positive = false) {
  Tensor t = random_tensor(shape, seed, DType::f64, positive ? 0.25 : -2, positive ? 2.25 : 2);
  return is_floating(dtype) ? t.to(dtype) : mul(t, 10.0).to(dtype);
}

bool positive_only(UnaryOp op) {
  return op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt || op == UnaryOp::Reciprocal;
}

// The functor's name and whether it is defined on integers, as the backends see it.
template <class Op, class F>
decltype(auto) visit(Op op, F&& f) {
  if constexpr (std::is_same_v<Op, UnaryOp>) return detail::visit_unary(op, f);
  else if constexpr (std::is_same_v<Op, BinaryOp>) return detail::visit_binary(op, f);
  else return detail::visit_compare(op, f);
}
template <class Op>
std::string name_of(Op op) {
  return visit(op, [](auto f) { return std::string(decltype(f)::kName); });
}
template <class Op>
bool on_integers(Op op) {
  return visit(op, [](auto f) { return decltype(f)::kIntegers; });
}

std::vector<DType> dtypes_for(bool integers) {
  if (integers) return {DType::f32, DType::f64, DType::i64, DType::i32, DType::u8};
  return {DType::f32, DType::f64};
}

}  // namespace

TEST_CASE("CUDA parity: every unary op, contiguous and transposed", "[cuda]") {
  if (!cuda_ready()) return;
  for (int i = 0; i < static_cast<int>(UnaryOp::kCount); ++i) {
    const auto op = static_cast<UnaryOp>(i);
    for (DType dt : dtypes_for(on_integers(op))) {
      const std::string name = fmt::format("{} {}", name_of(op), dtype_name(dt));
      const Tensor x = input({37, 53}, 10 + i, dt, positive_only(op));
      check_parity({name, {x}, [op](const auto& in) { return unary(op, in[0]); }});
      check_parity({name + " transposed", {x}, [op](const auto& in) { return unary(op, in[0].t()); }});
    }
  }
}

TEST_CASE("CUDA parity: every binary op, same shape and broadcast", "[cuda]") {
  if (!cuda_ready()) return;
  for (int i = 0; i < static_cast<int>(BinaryOp::kCount); ++i) {
    const auto op = static_cast<BinaryOp>(i);
    // pow's base and div's divisor positive: both devices then stay finite.
    const bool a_positive = op == BinaryOp::Pow, b_positive = op == BinaryOp::Div;
    for (DType dt : dtypes_for(on_integers(op))) {
      const std::string name = fmt::format("{} {}", name_of(op), dtype_name(dt));
      const Tensor a = input({4, 5, 6}, 100 + i, dt, a_positive), b = input({4, 5, 6}, 200 + i, dt, b_positive);
      check_parity({name, {a, b}, [op](const auto& in) { return binary(op, in[0], in[1]); }});
      // (4,1,6) with (5,1): both sides broadcast to (4,5,6).
      const Tensor c = input({4, 1, 6}, 300 + i, dt, a_positive), d = input({5, 1}, 400 + i, dt, b_positive);
      check_parity({name + " broadcast", {c, d}, [op](const auto& in) { return binary(op, in[0], in[1]); }});
      // A transposed operand against a row vector.
      const Tensor e = input({9, 7}, 500 + i, dt, a_positive), f = input({9}, 600 + i, dt, b_positive);
      check_parity({name + " transposed", {e, f}, [op](const auto& in) { return binary(op, in[0].t(), in[1]); }});
    }
  }
}

TEST_CASE("CUDA parity: compare and where", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dt : {DType::f32, DType::f64, DType::i64, DType::u8}) {
    // Integer inputs from a small range, so that equal elements occur.
    const Tensor a = input({6, 8}, 1, dt), b = input({8}, 2, dt);
    for (int i = 0; i < static_cast<int>(CompareOp::kCount); ++i) {
      const auto op = static_cast<CompareOp>(i);
      check_parity({fmt::format("{} {}", name_of(op), dtype_name(dt)), {a, b},
                    [op](const auto& in) { return compare(op, in[0], in[1]); }});
      check_parity({fmt::format("{} {} of equal operands", name_of(op), dtype_name(dt)), {a},
                    [op](const auto& in) { return compare(op, in[0], in[0]); }});
    }
    check_parity({fmt::format("where {}", dtype_name(dt)), {a, b}, [](const auto& in) {
                    return where(gt(in[0], in[1]), in[0].t().contiguous().t(), in[1]);
                  }});
  }
}

TEST_CASE("CUDA parity: the optimizer's in-place updates", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor self = input({33, 65}, 1, dt), a = input({33, 65}, 2, dt), b = input({65}, 3, dt, true);
    const std::string t = dtype_name(dt);
    check_parity({"add_ " + t, {self, a}, [](const auto& in) {
                    Tensor s = in[0].clone();
                    return add_(s, in[1], -0.3);
                  }});
    check_parity({"mul_ scalar " + t, {self}, [](const auto& in) {
                    Tensor s = in[0].clone();
                    return mul_(s, 0.9);
                  }});
    check_parity({"mul_ " + t, {self, a}, [](const auto& in) {
                    Tensor s = in[0].clone();
                    return mul_(s, in[1].t().contiguous().t());
                  }});
    check_parity({"addcmul_ " + t, {self, a, b}, [](const auto& in) {
                    Tensor s = in[0].clone();
                    return addcmul_(s, in[1], in[2], 0.5);
                  }});
    check_parity({"addcdiv_ " + t, {self, a, b}, [](const auto& in) {
                    Tensor s = in[0].clone();
                    return addcdiv_(s, in[1], in[2], -1e-3);
                  }});
    // The fused SGD step: parameter and buffer after it, with a full and a broadcast gradient.
    const SgdMomentumStep sgd{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01, .nesterov = true};
    for (const bool broadcast : {false, true}) {
      for (const bool want_buffer : {false, true}) {
        check_parity({fmt::format("sgd_momentum_step_ {}{}{}", t, broadcast ? ", broadcast gradient" : "",
                                  want_buffer ? ", buffer" : ", parameter"),
                      {self, a, b},
                      [&sgd, broadcast, want_buffer](const auto& in) {
                        Tensor p = in[0].clone(), buf = in[1].clone();
                        sgd_momentum_step_(p, buf, broadcast ? in[2] : mul(in[1], 0.5), sgd);
                        return want_buffer ? buf : p;
                      }});
      }
    }
  }
}

TEST_CASE("CUDA parity: copies that convert dtype or layout, and strided fills", "[cuda]") {
  if (!cuda_ready()) return;
  const Tensor x = input({24, 40}, 7, DType::f32);
  for (DType to : {DType::f32, DType::f64, DType::i64, DType::i32, DType::u8}) {
    check_parity({fmt::format("cast f32 -> {}", dtype_name(to)), {x}, [to](const auto& in) { return in[0].to(to); }});
    check_parity({fmt::format("transposed cast f32 -> {}", dtype_name(to)), {x},
                  [to](const auto& in) { return in[0].t().to(to); }});
  }
  check_parity({"contiguous of a transposed slice", {x},
                [](const auto& in) { return in[0].slice(1, 3, 40, 3).t().contiguous(); }});
  check_parity({"clone (device-to-device copy)", {x}, [](const auto& in) { return in[0].clone(); }});
  check_parity({"fill of every other column", {x}, [](const auto& in) {
                  Tensor y = in[0].clone();
                  Tensor cols = y.slice(1, 0, 40, 2);
                  cols.fill_(-1.5);
                  return y;
                }});
}

}  // namespace dtrain::test
