// The element-wise arithmetic of the all-reduce algorithms: plain loops that the compiler
// vectorizes, instantiated once per (dtype, op) so that the op is chosen outside the loop.
#pragma once

#include "dtrain/comm/communicator.h"

#include <cstddef>

namespace dtrain::dist {

// dst[i] = a[i] (op) b[i] for i < count; dst may be a (in place). op is Sum, Max or Min:
// the algorithms run Mean as Sum and then call divide().
void combine(void* dst, const void* a, const void* b, std::size_t count, DType dtype, ReduceOp op);
// data[i] /= divisor (floating dtypes).
void divide(void* data, std::size_t count, DType dtype, double divisor);

}  // namespace dtrain::dist
