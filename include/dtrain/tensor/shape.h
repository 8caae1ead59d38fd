// Shapes and strides, in elements. A Shape of size 0 is a scalar (one element).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain {

using Shape = std::vector<std::int64_t>;
using Strides = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"
Strides contiguous_strides(const Shape& shape);
// numpy broadcasting; throws dtrain::Error naming `op` and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Normalizes a possibly negative dim against `ndim`; throws naming `op` when out of range.
int normalize_dim(std::int64_t dim, std::int64_t ndim, const char* op);

}  // namespace dtrain
