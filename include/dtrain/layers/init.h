// Weight initializers (in place, from a Generator or the default one). Fans follow
// PyTorch: for a weight (out, in, k...) fan_in = in * prod(k), fan_out = out * prod(k).
#pragma once

#include "dtrain/tensor/ops.h"

namespace dtrain::nn::init {

enum class FanMode { In, Out };

std::int64_t fan_in(const Tensor& weight);
std::int64_t fan_out(const Tensor& weight);

// Kaiming/He for ReLU networks: std = sqrt(2 / fan) (gain sqrt(2)).
void kaiming_normal_(Tensor& w, FanMode mode = FanMode::In, Generator* gen = nullptr);
// U(-b, b) with b = gain * sqrt(3 / fan), gain = sqrt(2 / (1 + a^2)). a = sqrt(5) gives
// PyTorch's default Linear/Conv2d init, U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void kaiming_uniform_(Tensor& w, double a = 0, FanMode mode = FanMode::In, Generator* gen = nullptr);
// Glorot: U(-b, b), b = sqrt(6 / (fan_in + fan_out)); normal std = sqrt(2 / (fan_in + fan_out)).
void xavier_uniform_(Tensor& w, Generator* gen = nullptr);
void xavier_normal_(Tensor& w, Generator* gen = nullptr);

}  // namespace dtrain::nn::init
