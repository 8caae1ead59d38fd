// Element types and the one place that maps a runtime DType to a C++ type.
#pragma once

#include "dtrain/core/error.h"

#include <cstddef>
#include <cstdint>

namespace dtrain {

// f64 exists mainly for exact finite-difference gradient checks; f16/bf16 come with CUDA.
enum class DType : std::uint8_t { f32 = 0, f64, i64, i32, u8 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i64: return 8;
    case DType::i32: return 4;
    case DType::u8: return 1;
  }
  return 0;
}
constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }
const char* dtype_name(DType t);

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = DType::u8; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

template <class T> struct type_tag { using type = T; };

// Calls f(type_tag<T>{}) with T the C++ type of `t`.
template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(type_tag<float>{});
    case DType::f64: return f(type_tag<double>{});
    case DType::i64: return f(type_tag<std::int64_t>{});
    case DType::i32: return f(type_tag<std::int32_t>{});
    case DType::u8: return f(type_tag<std::uint8_t>{});
  }
  DTRAIN_FAIL("unknown dtype {}", static_cast<int>(t));
}

// As dispatch_dtype, for ops defined only on floating types; `op` names the op in the error.
template <class F>
decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f(type_tag<float>{});
    case DType::f64: return f(type_tag<double>{});
    default: DTRAIN_FAIL("{}: expected a floating dtype (f32, f64), got {}", op, dtype_name(t));
  }
}

}  // namespace dtrain
