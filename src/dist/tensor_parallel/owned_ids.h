// The ids of a vocabulary-parallel rank's rows (private to dist/tensor_parallel): which of a
// tensor of whole-vocabulary ids fall in this rank's rows [begin, begin + size), shared by
// the embedding's lookup and the cross-entropy's target logits.
#pragma once

#include "dtrain/tensor/ops.h"

#include <cstdint>

namespace dtrain::dist::detail {

struct OwnedIds {
  Tensor index;  // i64, the id's row on this rank, or 0 where another rank holds it
  Tensor owned;  // f32, 1 where this rank holds the id's row, else 0
};

inline OwnedIds owned_ids(const Tensor& ids, std::int64_t begin, std::int64_t size) {
  const Tensor local = sub(ids.to(DType::i64), static_cast<double>(begin));
  const Tensor zero = Tensor::zeros({1}, {DType::i64, local.device()});
  const Tensor end = Tensor::full({1}, static_cast<double>(size), {DType::i64, local.device()});
  const Tensor above = ge(local, zero), below = lt(local, end);
  return {where(above, where(below, local, zero), zero), mul(above.to(DType::f32), below.to(DType::f32))};
}

}  // namespace dtrain::dist::detail
