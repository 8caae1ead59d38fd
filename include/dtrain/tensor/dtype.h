// Element types and the one place that maps a runtime DType to a C++ type.
#pragma once

#include "dtrain/core/error.h"
#include "dtrain/tensor/half.h"

#include <cstddef>
#include <cstdint>

namespace dtrain {

// f64 exists mainly for exact finite-difference gradient checks. f16 and bf16 (Half,
// BFloat16) are storage types for mixed precision: tensors of them copy and convert, and
// matmul and conv2d take them as operands (accumulating in f32, see ops.h); every other op
// computes in f32, f64 or integers and says so when given one.
enum class DType : std::uint8_t { f32 = 0, f64, i64, i32, u8, f16, bf16 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i64: return 8;
    case DType::i32: return 4;
    case DType::u8: return 1;
    case DType::f16: return 2;
    case DType::bf16: return 2;
  }
  return 0;
}
constexpr bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }  // the 16-bit floats
constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f64 || is_half(t); }
// The dtype products of t's are summed in and returned as (matmul, conv2d): f32 for the
// 16-bit floats, t itself otherwise.
constexpr DType product_dtype(DType t) { return is_half(t) ? DType::f32 : t; }
const char* dtype_name(DType t);

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::bf16; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

template <class T> struct type_tag { using type = T; };

// Calls f(type_tag<T>{}) with T the C++ type of `t`, for the types ops compute in (every
// dtype but the 16-bit floats, which throw).
template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(type_tag<float>{});
    case DType::f64: return f(type_tag<double>{});
    case DType::i64: return f(type_tag<std::int64_t>{});
    case DType::i32: return f(type_tag<std::int32_t>{});
    case DType::u8: return f(type_tag<std::uint8_t>{});
    case DType::f16:
    case DType::bf16: break;
  }
  DTRAIN_FAIL("dtype {}: this op does not compute in 16-bit floats; convert with .to(DType::f32)", dtype_name(t));
}

// As dispatch_dtype, over every dtype, the 16-bit floats included: for copies and fills.
template <class F>
decltype(auto) dispatch_any_dtype(DType t, F&& f) {
  if (t == DType::f16) return f(type_tag<Half>{});
  if (t == DType::bf16) return f(type_tag<BFloat16>{});
  return dispatch_dtype(t, f);
}

// As dispatch_dtype, for ops defined only on f32 and f64; `op` names the op in the error.
template <class F>
decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f(type_tag<float>{});
    case DType::f64: return f(type_tag<double>{});
    default:
      DTRAIN_FAIL("{}: expected f32 or f64, got {}{}", op, dtype_name(t),
                  is_half(t) ? " (16-bit floats are for storage, matmul and conv2d; convert with .to(DType::f32))" : "");
  }
}

}  // namespace dtrain
