// Embedding: a lookup table (num_embeddings, dim) indexed by an integer tensor.
#pragma once

#include "dtrain/layers/module.h"

namespace dtrain::nn {

class Embedding : public Module {
 public:
  // Weights ~ N(0, 1), as in PyTorch.
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim);
  // indices: i64/i32 of any shape -> (..., embedding_dim).
  Variable forward(const Variable& indices) override;
  std::string describe() const override;

  Variable weight;

 private:
  std::int64_t num_, dim_;
};

}  // namespace dtrain::nn
