// The element-wise math, written once as small functors that compile for the host and
// (under nvcc) for the device, so that the CPU tests exercise the arithmetic the GPU runs.
// Each functor has a templated operator() over the element type, its op's name for error
// messages (kName) and, for unary and binary ops, whether it is defined on integer types
// (kIntegers): the ops layer validates dtypes with that flag and the backends use it to
// choose which element types to instantiate.
#pragma once

#include "dtrain/core/host_device.h"
#include "dtrain/tensor/ops.h"
#if !defined(__CUDACC__)
#include "tensor/cpu/vector_exp.h"
#endif

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace dtrain::detail {

template <class T>
DTRAIN_HD inline bool is_nan(T x) {
  if constexpr (std::is_floating_point_v<T>) return x != x;
  else return false;
}

template <class T>
inline constexpr bool is_half_type_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Value conversion between element types. Floating values go through i64 on their way to
// an integer type, so that negative values wrap (as in numpy) instead of being undefined
// for u8. The 16-bit floats convert through float, as their own arithmetic does (so a
// double rounds twice on its way to one, as in PyTorch).
template <class To>
struct CastTo {
  template <class From>
  DTRAIN_HD To operator()(From v) const {
    if constexpr (is_half_type_v<From>) {
      return CastTo<To>{}(static_cast<float>(v));
    } else if constexpr (is_half_type_v<To>) {
      return To(static_cast<float>(v));
    } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
      return static_cast<To>(static_cast<std::int64_t>(v));
    } else {
      return static_cast<To>(v);
    }
  }
};

// ---- unary -------------------------------------------------------------------------

struct NegF {
  static constexpr const char* kName = "neg";
  static constexpr bool kIntegers = true;
  template <class T> DTRAIN_HD T operator()(T x) const { return static_cast<T>(-x); }
};
struct ExpF {
  static constexpr const char* kName = "exp";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T x) const { return std::exp(x); }
};
struct LogF {
  static constexpr const char* kName = "log";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T x) const { return std::log(x); }
};
struct SqrtF {
  static constexpr const char* kName = "sqrt";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T x) const { return std::sqrt(x); }
};
struct RsqrtF {
  static constexpr const char* kName = "rsqrt";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T x) const { return T(1) / std::sqrt(x); }
};
struct AbsF {
  static constexpr const char* kName = "abs";
  static constexpr bool kIntegers = true;
  template <class T> DTRAIN_HD T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else return x < T(0) ? static_cast<T>(-x) : x;
  }
};
struct SquareF {
  static constexpr const char* kName = "square";
  static constexpr bool kIntegers = true;
  template <class T> DTRAIN_HD T operator()(T x) const { return static_cast<T>(x * x); }
};
struct ReciprocalF {
  static constexpr const char* kName = "reciprocal";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T x) const { return T(1) / x; }
};
struct SignF {
  static constexpr const char* kName = "sign";
  static constexpr bool kIntegers = true;
  template <class T> DTRAIN_HD T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return static_cast<T>(x != 0);
    else return static_cast<T>((T(0) < x) - (x < T(0)));
  }
};
// Written as "negative -> 0" so that NaN propagates, as in PyTorch.
struct ReluF {
  static constexpr const char* kName = "relu";
  static constexpr bool kIntegers = true;
  template <class T> DTRAIN_HD T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else return x < T(0) ? T(0) : x;
  }
};
// Stable for large |x|: exp is only ever taken of a non-positive number.
// exp for the element-wise functors: f32 on the CPU through vector_exp.h's arithmetic, which
// GCC vectorizes inside the functor's loop (libm's expf is a call per element: GELU's
// sigmoid made a small GPT's step a third slower); everything else, and CUDA, std::exp.
#if defined(__CUDACC__)
template <class T>
DTRAIN_HD inline T elementwise_exp(T x) {
  return std::exp(x);
}
#else
// Always inlined: GCC keeps the call out of line in the instruction-set clones otherwise.
template <class T>
[[gnu::always_inline]] inline T elementwise_exp(T x) {
  if constexpr (std::is_same_v<T, float>) return cpu::vector_exp(x);
  else return std::exp(x);
}
#endif

// The functors built on elementwise_exp: always inlined on the CPU, where GCC otherwise
// calls them out of line from the instruction-set clones of the loops (scalar, per element).
#if defined(__CUDACC__)
#define DTRAIN_HD_INLINE DTRAIN_HD
#else
#define DTRAIN_HD_INLINE [[gnu::always_inline]] inline
#endif

// Both branches' values from exp(-|x|) (no overflow), chosen without a branch so that the
// loop vectorizes: 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) below.
struct SigmoidF {
  static constexpr const char* kName = "sigmoid";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD_INLINE T operator()(T x) const {
    const T e = elementwise_exp(x >= T(0) ? -x : x);
    const T d = T(1) + e;
    return x >= T(0) ? T(1) / d : e / d;
  }
};
struct TanhF {
  static constexpr const char* kName = "tanh";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T x) const { return std::tanh(x); }
};
// gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), the exact form. Written with
// erfc(-x / sqrt(2)), the same value, which keeps its relative accuracy for negative x
// where 1 + erf(..) would cancel.
struct GeluF {
  static constexpr const char* kName = "gelu";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T x) const {
    return T(0.5) * x * std::erfc(x * T(-0.70710678118654752440));
  }
};
// gelu'(x) = Phi(x) + x * phi(x), phi the standard normal density.
struct GeluDerivF {
  template <class T> DTRAIN_HD T operator()(T x) const {
    T cdf = T(0.5) * std::erfc(x * T(-0.70710678118654752440));
    T pdf = T(0.39894228040143267794) * std::exp(T(-0.5) * x * x);
    return cdf + x * pdf;
  }
};
// gelu with the tanh approximation (GPT-2's gelu_new, PyTorch's approximate='tanh'):
// 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3). Written as x * sigmoid(2u), the
// same value, which keeps its relative accuracy for negative x where 1 + tanh(u) would
// cancel (as gelu's erfc form does).
struct GeluTanhF {
  static constexpr const char* kName = "gelu_tanh";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD_INLINE T operator()(T x) const {
    const T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
    return x * SigmoidF{}(T(2) * u);
  }
};
// With s = sigmoid(2u) = 0.5 (1 + tanh(u)), so that 1 - tanh(u)^2 = 4 s (1 - s):
// gelu_tanh'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
struct GeluTanhDerivF {
  template <class T> DTRAIN_HD_INLINE T operator()(T x) const {
    const T k = T(0.79788456080286535588), c = T(0.044715);
    const T x2 = x * x;
    const T s = SigmoidF{}(T(2) * k * (x + c * x2 * x));
    return s + T(2) * x * s * (T(1) - s) * k * (T(1) + T(3) * c * x2);
  }
};
// silu(x) = x * sigmoid(x) (swish), with sigmoid's stable form.
struct SiluF {
  static constexpr const char* kName = "silu";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD_INLINE T operator()(T x) const { return x * SigmoidF{}(x); }
};

// ---- binary --------------------------------------------------------------------------

struct AddF {
  static constexpr const char* kName = "add";
  static constexpr bool kIntegers = true;
  template <class T> DTRAIN_HD T operator()(T a, T b) const { return static_cast<T>(a + b); }
};
struct SubF {
  static constexpr const char* kName = "sub";
  static constexpr bool kIntegers = true;
  template <class T> DTRAIN_HD T operator()(T a, T b) const { return static_cast<T>(a - b); }
};
struct MulF {
  static constexpr const char* kName = "mul";
  static constexpr bool kIntegers = true;
  template <class T> DTRAIN_HD T operator()(T a, T b) const { return static_cast<T>(a * b); }
};
// Floating only: integer division by zero would trap instead of throwing.
struct DivF {
  static constexpr const char* kName = "div";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T a, T b) const { return a / b; }
};
// Max and Min propagate NaN from either side, as PyTorch's maximum/minimum do.
struct MaxF {
  static constexpr const char* kName = "maximum";
  static constexpr bool kIntegers = true;
  template <class T> DTRAIN_HD T operator()(T a, T b) const { return (a > b || is_nan(a)) ? a : b; }
};
struct MinF {
  static constexpr const char* kName = "minimum";
  static constexpr bool kIntegers = true;
  template <class T> DTRAIN_HD T operator()(T a, T b) const { return (a < b || is_nan(a)) ? a : b; }
};
struct PowF {
  static constexpr const char* kName = "pow";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T a, T b) const { return std::pow(a, b); }
};
struct ReluGradF {
  static constexpr const char* kName = "relu_grad";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T g, T x) const { return x > T(0) ? g : T(0); }
};
struct GeluGradF {
  static constexpr const char* kName = "gelu_grad";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T g, T x) const { return g * GeluDerivF{}(x); }
};
struct GeluTanhGradF {
  static constexpr const char* kName = "gelu_tanh_grad";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD_INLINE T operator()(T g, T x) const { return g * GeluTanhDerivF{}(x); }
};
// silu'(x) = s (1 + x (1 - s)) with s = sigmoid(x).
struct SiluGradF {
  static constexpr const char* kName = "silu_grad";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD_INLINE T operator()(T g, T x) const {
    const T s = SigmoidF{}(x);
    return g * s * (T(1) + x * (T(1) - s));
  }
};
struct SigmoidGradF {
  static constexpr const char* kName = "sigmoid_grad";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T g, T y) const { return g * y * (T(1) - y); }
};
struct TanhGradF {
  static constexpr const char* kName = "tanh_grad";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T g, T y) const { return g * (T(1) - y * y); }
};
// The sum rounded to T first, as add then relu would give it.
struct AddReluF {
  static constexpr const char* kName = "add_relu";
  static constexpr bool kIntegers = false;
  template <class T> DTRAIN_HD T operator()(T a, T b) const { return ReluF{}(static_cast<T>(a + b)); }
};

// ---- comparison (result 0/1, stored as u8) -------------------------------------------

struct EqF {
  static constexpr const char* kName = "eq";
  template <class T> DTRAIN_HD bool operator()(T a, T b) const { return a == b; }
};
struct NeF {
  static constexpr const char* kName = "ne";
  template <class T> DTRAIN_HD bool operator()(T a, T b) const { return a != b; }
};
struct LtF {
  static constexpr const char* kName = "lt";
  template <class T> DTRAIN_HD bool operator()(T a, T b) const { return a < b; }
};
struct LeF {
  static constexpr const char* kName = "le";
  template <class T> DTRAIN_HD bool operator()(T a, T b) const { return a <= b; }
};
struct GtF {
  static constexpr const char* kName = "gt";
  template <class T> DTRAIN_HD bool operator()(T a, T b) const { return a > b; }
};
struct GeF {
  static constexpr const char* kName = "ge";
  template <class T> DTRAIN_HD bool operator()(T a, T b) const { return a >= b; }
};

// ---- from the op enums to the functors -------------------------------------------------
// visit_*(op, f) calls f(Functor{}) for the functor of `op`: the one switch per enum that
// every backend shares.

static_assert(static_cast<int>(UnaryOp::kCount) == 15, "a UnaryOp was added: give it a functor below");
static_assert(static_cast<int>(BinaryOp::kCount) == 14, "a BinaryOp was added: give it a functor below");
static_assert(static_cast<int>(CompareOp::kCount) == 6, "a CompareOp was added: give it a functor below");

template <class F>
decltype(auto) visit_unary(UnaryOp op, F&& f) {
  switch (op) {
    case UnaryOp::Neg: return f(NegF{});
    case UnaryOp::Exp: return f(ExpF{});
    case UnaryOp::Log: return f(LogF{});
    case UnaryOp::Sqrt: return f(SqrtF{});
    case UnaryOp::Rsqrt: return f(RsqrtF{});
    case UnaryOp::Abs: return f(AbsF{});
    case UnaryOp::Square: return f(SquareF{});
    case UnaryOp::Reciprocal: return f(ReciprocalF{});
    case UnaryOp::Sign: return f(SignF{});
    case UnaryOp::Relu: return f(ReluF{});
    case UnaryOp::Sigmoid: return f(SigmoidF{});
    case UnaryOp::Tanh: return f(TanhF{});
    case UnaryOp::Gelu: return f(GeluF{});
    case UnaryOp::GeluTanh: return f(GeluTanhF{});
    case UnaryOp::Silu: return f(SiluF{});
    case UnaryOp::kCount: break;
  }
  DTRAIN_FAIL("unknown UnaryOp {}", static_cast<int>(op));
}

template <class F>
decltype(auto) visit_binary(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::Add: return f(AddF{});
    case BinaryOp::Sub: return f(SubF{});
    case BinaryOp::Mul: return f(MulF{});
    case BinaryOp::Div: return f(DivF{});
    case BinaryOp::Max: return f(MaxF{});
    case BinaryOp::Min: return f(MinF{});
    case BinaryOp::Pow: return f(PowF{});
    case BinaryOp::ReluGrad: return f(ReluGradF{});
    case BinaryOp::GeluGrad: return f(GeluGradF{});
    case BinaryOp::SigmoidGrad: return f(SigmoidGradF{});
    case BinaryOp::TanhGrad: return f(TanhGradF{});
    case BinaryOp::AddRelu: return f(AddReluF{});
    case BinaryOp::GeluTanhGrad: return f(GeluTanhGradF{});
    case BinaryOp::SiluGrad: return f(SiluGradF{});
    case BinaryOp::kCount: break;
  }
  DTRAIN_FAIL("unknown BinaryOp {}", static_cast<int>(op));
}

template <class F>
decltype(auto) visit_compare(CompareOp op, F&& f) {
  switch (op) {
    case CompareOp::Eq: return f(EqF{});
    case CompareOp::Ne: return f(NeF{});
    case CompareOp::Lt: return f(LtF{});
    case CompareOp::Le: return f(LeF{});
    case CompareOp::Gt: return f(GtF{});
    case CompareOp::Ge: return f(GeF{});
    case CompareOp::kCount: break;
  }
  DTRAIN_FAIL("unknown CompareOp {}", static_cast<int>(op));
}

}  // namespace dtrain::detail
