// Convolutions through oneDNN (see onednn_conv.cpp). Tensors are contiguous NCHW / OIHW;
// operands are f32 or bf16 (only on CPUs with bf16 dot products: onednn::has_bf16_dot),
// outputs f32 and overwritten. Forward takes no bias with bf16 operands.
#pragma once

#include "dtrain/tensor/ops.h"

namespace dtrain::detail::onednn {

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, Tensor& out);
void conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, Tensor& grad_x);
void conv2d_backward_weights(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p, Tensor& grad_w);

}  // namespace dtrain::detail::onednn
