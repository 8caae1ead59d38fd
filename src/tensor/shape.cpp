#include "dtrain/tensor/shape.h"

#include "dtrain/core/error.h"
#include "dtrain/tensor/dtype.h"

#include <fmt/ranges.h>

namespace dtrain {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "unknown";
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    DTRAIN_CHECK(da == db || da == 1 || db == 1, "{}: shapes {} and {} cannot be broadcast together", op,
                 shape_str(a), shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int normalize_dim(std::int64_t dim, std::int64_t ndim, const char* op) {
  std::int64_t d = dim < 0 ? dim + ndim : dim;
  DTRAIN_CHECK(d >= 0 && d < std::max<std::int64_t>(ndim, 1), "{}: dim {} out of range for a {}-d tensor", op, dim,
               ndim);
  return static_cast<int>(d);
}

}  // namespace dtrain
