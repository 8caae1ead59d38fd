#include "dtrain/layers/embedding.h"

namespace dtrain::nn {

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim)
    : num_(num_embeddings), dim_(embedding_dim) {
  DTRAIN_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding({}, {}): sizes must be positive", num_embeddings,
               embedding_dim);
  Tensor w = Tensor::empty({num_embeddings, embedding_dim});
  normal_(w, 0, 1);
  weight = register_parameter("weight", w);
}

Variable Embedding::forward(const Variable& indices) {
  const Tensor& idx = indices.data();
  DTRAIN_CHECK(idx.dtype() == DType::i64 || idx.dtype() == DType::i32,
               "Embedding: indices must be i64 or i32, got {}", dtype_name(idx.dtype()));
  Shape out_shape = idx.shape();
  out_shape.push_back(dim_);
  return reshape(index_select(weight, 0, idx.reshape({-1})), out_shape);
}

std::string Embedding::describe() const { return fmt::format("Embedding({}, {})", num_, dim_); }

}  // namespace dtrain::nn
