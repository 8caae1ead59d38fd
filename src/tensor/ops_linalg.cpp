// matmul: validates ranks and shapes, applies the transposes as views and hands the
// backend one batched (B,m,k) x (B,k,n) problem; a 2-D right operand is broadcast over the
// batch with stride 0, never copied, or the batch is folded into the rows when it can be.
// 16-bit operands give an f32 product (summed in f32), the mixed-precision GEMM.
#include "dtrain/tensor/ops.h"

#include "tensor/backend.h"

namespace dtrain {

void matmul_add_(Tensor& out, const Tensor& a_in, const Tensor& b_in, bool transpose_a, bool transpose_b) {
  check_defined(out, "matmul_add_");
  DTRAIN_CHECK(a_in.dim() == 2 && b_in.dim() == 2, "matmul_add_: expected 2-D operands, got {} and {}",
               shape_str(a_in.shape()), shape_str(b_in.shape()));
  // matmul's own checks of the operands, on an empty product: no work.
  const Tensor probe = matmul(a_in.narrow(transpose_a ? 1 : 0, 0, 0), b_in, transpose_a, transpose_b);
  const Tensor a = transpose_a ? a_in.transpose(0, 1) : a_in;
  const Tensor b = transpose_b ? b_in.transpose(0, 1) : b_in;
  const Shape shape{a.size(0), b.size(1)};
  DTRAIN_CHECK(
      out.shape() == shape && out.dtype() == probe.dtype() && out.device() == a.device() && out.is_contiguous(),
      "matmul_add_: out must be a contiguous {} {} on {} (got a {} {} on {}{})", dtype_name(probe.dtype()),
      shape_str(shape), a.device().str(), dtype_name(out.dtype()), shape_str(out.shape()), out.device().str(),
      out.is_contiguous() ? "" : ", not contiguous");
  DTRAIN_CHECK(!out.same_storage(a_in) && !out.same_storage(b_in), "matmul_add_: out shares storage with an operand");
  Tensor out3 = out.view({1, shape[0], shape[1]});
  detail::backend(a.device()).matmul_add(a.unsqueeze(0), b.unsqueeze(0), out3);
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in, bool transpose_a, bool transpose_b) {
  check_defined(a_in, "matmul");
  check_defined(b_in, "matmul");
  DTRAIN_CHECK(a_in.device() == b_in.device(), "matmul: operands on different devices ({} and {})", a_in.device().str(),
               b_in.device().str());
  DTRAIN_CHECK(a_in.dtype() == b_in.dtype(), "matmul: operands have different dtypes ({} and {})",
               dtype_name(a_in.dtype()), dtype_name(b_in.dtype()));
  DTRAIN_CHECK(is_floating(a_in.dtype()), "matmul: expected floating operands (f32, f64, f16, bf16), got {}",
               dtype_name(a_in.dtype()));
  const bool ranks_ok =
      (a_in.dim() == 2 && b_in.dim() == 2) || (a_in.dim() == 3 && (b_in.dim() == 2 || b_in.dim() == 3));
  DTRAIN_CHECK(ranks_ok, "matmul: cannot multiply {} by {}: expected 2-D x 2-D, 3-D x 3-D or 3-D x 2-D",
               shape_str(a_in.shape()), shape_str(b_in.shape()));

  Tensor a = transpose_a ? a_in.transpose(-2, -1) : a_in;
  Tensor b = transpose_b ? b_in.transpose(-2, -1) : b_in;
  const std::int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  DTRAIN_CHECK(b.size(-2) == k,
               "matmul: cannot multiply {} by {} (transpose_a={}, transpose_b={}): inner dimensions {} and {} differ",
               shape_str(a_in.shape()), shape_str(b_in.shape()), transpose_a, transpose_b, k, b.size(-2));
  const std::int64_t batch = a.dim() == 3 ? a.size(0) : 1;
  DTRAIN_CHECK(b.dim() == 2 || b.size(0) == batch, "matmul: cannot multiply {} by {}: batch sizes {} and {} differ",
               shape_str(a_in.shape()), shape_str(b_in.shape()), batch, b.size(0));

  Tensor out = Tensor::empty({batch, m, n}, {product_dtype(a.dtype()), a.device()});
  detail::Backend& be = detail::backend(a.device());
  if (a.dim() == 2) {
    be.matmul(a.unsqueeze(0), b.unsqueeze(0), out);
    return out.view({m, n});
  }
  if (b.dim() == 2 && a.stride(0) == m * a.stride(1)) {
    // A stack of row blocks times one matrix is one (batch*m, k) x (k, n) product: a single
    // large GEMM instead of `batch` small ones.
    Tensor folded = out.view({1, batch * m, n});
    be.matmul(a.reshape({1, batch * m, k}), b.unsqueeze(0), folded);
    return out;
  }
  be.matmul(a, b.dim() == 3 ? b : b.unsqueeze(0).expand({batch, k, n}), out);
  return out;
}

}  // namespace dtrain
