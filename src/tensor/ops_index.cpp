// Indexing and joining ops: shape, dtype and device checks, output allocation (zero-filled
// for the accumulating ones, index_add and scatter_add), then the backend. Index values
// are range-checked by the backend, which is where they can be read.
#include "dtrain/tensor/ops.h"

#include "tensor/backend.h"

namespace dtrain {
namespace {

void check_index(const Tensor& index, const Tensor& like, const char* op) {
  check_defined(index, op);
  DTRAIN_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, "{}: index must be i64 or i32, got {}", op,
               dtype_name(index.dtype()));
  DTRAIN_CHECK(index.device() == like.device(), "{}: index on {} but data on {}", op, index.device().str(),
               like.device().str());
}

void check_vector_index(const Tensor& index, const char* op) {
  DTRAIN_CHECK(index.dim() == 1, "{}: index must be 1-D, got shape {}", op, shape_str(index.shape()));
}

// a and b agree on every dim except `dim` (same rank assumed).
bool same_except(const Shape& a, const Shape& b, int dim) {
  for (std::size_t k = 0; k < a.size(); ++k)
    if (static_cast<int>(k) != dim && a[k] != b[k]) return false;
  return true;
}

}  // namespace

Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index) {
  check_defined(x, "index_select");
  check_index(index, x, "index_select");
  check_vector_index(index, "index_select");
  const int d = normalize_dim(dim, x.dim(), "index_select");
  Shape shape = x.shape();
  shape[d] = index.numel();
  Tensor out = Tensor::empty(shape, x.options());
  detail::backend(x.device()).index_select(x, d, index, out);
  return out;
}

Tensor index_add(const Shape& shape, std::int64_t dim, const Tensor& index, const Tensor& src) {
  check_defined(src, "index_add");
  check_index(index, src, "index_add");
  check_vector_index(index, "index_add");
  const int d = normalize_dim(dim, static_cast<std::int64_t>(shape.size()), "index_add");
  DTRAIN_CHECK(src.dim() == static_cast<std::int64_t>(shape.size()) && same_except(src.shape(), shape, d) &&
                   src.size(d) == index.numel(),
               "index_add: src {} does not match output {} along dim {} with {} indices", shape_str(src.shape()),
               shape_str(shape), d, index.numel());
  Tensor out = Tensor::zeros(shape, src.options());
  detail::backend(src.device()).index_add(d, index, src, out);
  return out;
}

Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index) {
  check_defined(x, "gather");
  check_index(index, x, "gather");
  const int d = normalize_dim(dim, x.dim(), "gather");
  DTRAIN_CHECK(index.dim() == x.dim() && same_except(index.shape(), x.shape(), d),
               "gather: index {} must match input {} on every dim but {}", shape_str(index.shape()),
               shape_str(x.shape()), d);
  Tensor out = Tensor::empty(index.shape(), x.options());
  detail::backend(x.device()).gather(x, d, index, out);
  return out;
}

Tensor scatter_add(const Shape& shape, std::int64_t dim, const Tensor& index, const Tensor& src) {
  check_defined(src, "scatter_add");
  check_index(index, src, "scatter_add");
  const int d = normalize_dim(dim, static_cast<std::int64_t>(shape.size()), "scatter_add");
  DTRAIN_CHECK(index.shape() == src.shape(), "scatter_add: index {} and src {} must have the same shape",
               shape_str(index.shape()), shape_str(src.shape()));
  DTRAIN_CHECK(src.dim() == static_cast<std::int64_t>(shape.size()) && same_except(src.shape(), shape, d),
               "scatter_add: src {} must match output {} on every dim but {}", shape_str(src.shape()), shape_str(shape),
               d);
  Tensor out = Tensor::zeros(shape, src.options());
  detail::backend(src.device()).scatter_add(d, index, src, out);
  return out;
}

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  DTRAIN_CHECK(!tensors.empty(), "cat: expected at least one tensor");
  const Tensor& first = tensors.front();
  check_defined(first, "cat");
  DTRAIN_CHECK(first.dim() >= 1, "cat: cannot concatenate 0-d tensors");
  const int d = normalize_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  shape[d] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_defined(t, "cat");
    DTRAIN_CHECK(t.dtype() == first.dtype() && t.device() == first.device(),
                 "cat: tensor {} is {} on {}, tensor 0 is {} on {}", i, dtype_name(t.dtype()), t.device().str(),
                 dtype_name(first.dtype()), first.device().str());
    DTRAIN_CHECK(t.dim() == first.dim() && same_except(t.shape(), first.shape(), d),
                 "cat: tensor {} has shape {}, tensor 0 has {}: they must match on every dim but {}", i,
                 shape_str(t.shape()), shape_str(first.shape()), d);
    shape[d] += t.size(d);
  }
  Tensor out = Tensor::empty(shape, first.options());
  detail::backend(first.device()).cat(tensors, d, out);
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim) {
  DTRAIN_CHECK(!tensors.empty(), "stack: expected at least one tensor");
  check_defined(tensors.front(), "stack");
  const Shape& shape = tensors.front().shape();
  const int d = normalize_dim(dim, static_cast<std::int64_t>(shape.size()) + 1, "stack");
  std::vector<Tensor> expanded;
  expanded.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    check_defined(tensors[i], "stack");
    DTRAIN_CHECK(tensors[i].shape() == shape, "stack: tensor {} has shape {}, tensor 0 has {}", i,
                 shape_str(tensors[i].shape()), shape_str(shape));
    expanded.push_back(tensors[i].unsqueeze(d));
  }
  return cat(expanded, d);
}

}  // namespace dtrain
