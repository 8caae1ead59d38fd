// The primitives the CUDA backend does not have yet (issue 5 adds them: reductions,
// cuBLAS matmul, cuDNN convolution, pooling and batch norm, softmax, indexing, random).
// Each throws one clear error naming the op, instead of failing somewhere obscure.
#include "tensor/cuda/cuda_backend.h"

#include <iterator>

namespace dtrain::detail {
namespace {

[[noreturn]] void not_implemented(const char* op) {
  DTRAIN_FAIL("cuda: {} is not implemented on CUDA tensors yet; move the tensors to the CPU (.to(Device::cpu()))",
              op);
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor&, const std::vector<std::int64_t>&, Tensor&) {
  static constexpr const char* kNames[] = {"sum", "mean", "max", "min"};
  static_assert(std::size(kNames) == static_cast<std::size_t>(ReduceOp::kCount));
  not_implemented(kNames[static_cast<int>(op)]);
}
void CudaBackend::argmax(const Tensor&, std::int64_t, Tensor&) { not_implemented("argmax"); }
void CudaBackend::matmul(const Tensor&, const Tensor&, Tensor&) { not_implemented("matmul"); }
void CudaBackend::conv2d(const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&, Tensor&) {
  not_implemented("conv2d");
}
void CudaBackend::conv2d_backward_input(const Tensor&, const Tensor&, const Conv2dParams&, Tensor&) {
  not_implemented("conv2d_backward_input");
}
void CudaBackend::conv2d_backward_weight(const Tensor&, const Tensor&, const Conv2dParams&, Tensor&) {
  not_implemented("conv2d_backward_weight");
}
void CudaBackend::max_pool2d(const Tensor&, const Pool2dParams&, Tensor&, Tensor&) { not_implemented("max_pool2d"); }
void CudaBackend::max_pool2d_backward(const Tensor&, const Tensor&, Tensor&) {
  not_implemented("max_pool2d_backward");
}
void CudaBackend::avg_pool2d(const Tensor&, const Pool2dParams&, Tensor&) { not_implemented("avg_pool2d"); }
void CudaBackend::avg_pool2d_backward(const Tensor&, const Pool2dParams&, Tensor&) {
  not_implemented("avg_pool2d_backward");
}
void CudaBackend::adaptive_avg_pool2d(const Tensor&, Tensor&) { not_implemented("adaptive_avg_pool2d"); }
void CudaBackend::adaptive_avg_pool2d_backward(const Tensor&, Tensor&) {
  not_implemented("adaptive_avg_pool2d_backward");
}
void CudaBackend::batch_norm(const Tensor&, const Tensor&, const Tensor&, double, Tensor&, Tensor&, Tensor&) {
  not_implemented("batch_norm");
}
void CudaBackend::batch_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      double, Tensor&, Tensor&, Tensor&) {
  not_implemented("batch_norm_backward");
}
void CudaBackend::softmax(const Tensor&, std::int64_t, bool log, Tensor&) {
  not_implemented(log ? "log_softmax" : "softmax");
}
void CudaBackend::softmax_backward(const Tensor&, const Tensor&, std::int64_t, bool log, Tensor&) {
  not_implemented(log ? "log_softmax_backward" : "softmax_backward");
}
void CudaBackend::index_select(const Tensor&, std::int64_t, const Tensor&, Tensor&) {
  not_implemented("index_select");
}
void CudaBackend::index_add(std::int64_t, const Tensor&, const Tensor&, Tensor&) { not_implemented("index_add"); }
void CudaBackend::gather(const Tensor&, std::int64_t, const Tensor&, Tensor&) { not_implemented("gather"); }
void CudaBackend::scatter_add(std::int64_t, const Tensor&, const Tensor&, Tensor&) { not_implemented("scatter_add"); }
void CudaBackend::cat(const std::vector<Tensor>&, std::int64_t, Tensor&) { not_implemented("cat"); }
void CudaBackend::uniform(Tensor&, double, double, std::uint64_t, std::uint64_t) { not_implemented("uniform"); }
void CudaBackend::normal(Tensor&, double, double, std::uint64_t, std::uint64_t) { not_implemented("normal"); }
void CudaBackend::bernoulli(Tensor&, double, std::uint64_t, std::uint64_t) { not_implemented("bernoulli"); }

}  // namespace dtrain::detail
