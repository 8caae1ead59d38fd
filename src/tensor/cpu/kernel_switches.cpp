// The switches of dtrain/tensor/cpu_kernels.h: process-wide, read from the environment once.
#include "dtrain/core/environment.h"
#include "dtrain/core/error.h"
#include "dtrain/tensor/cpu_kernels.h"

#include <atomic>
#include <string>

namespace dtrain {
namespace {

std::atomic<bool>& blocked_enabled() {
  static std::atomic<bool> enabled{env::get_int("DTRAIN_CPU_BLOCKED").value_or(1) != 0};
  return enabled;
}

ConvWeightGrad weight_grad_from_environment() {
  const std::optional<std::string> value = env::get("DTRAIN_CONV_WEIGHT_GRAD");
  if (!value || value->empty() || *value == "auto") return ConvWeightGrad::Auto;
  if (*value == "direct") return ConvWeightGrad::Direct;
  if (*value == "gemm") return ConvWeightGrad::Gemm;
  DTRAIN_FAIL("environment variable DTRAIN_CONV_WEIGHT_GRAD={}: expected auto, direct or gemm", *value);
}

std::atomic<ConvWeightGrad>& weight_grad() {
  static std::atomic<ConvWeightGrad> mode{weight_grad_from_environment()};
  return mode;
}

}  // namespace

bool cpu_blocked_layout() { return blocked_enabled().load(std::memory_order_relaxed); }
void set_cpu_blocked_layout(bool enabled) { blocked_enabled().store(enabled, std::memory_order_relaxed); }

ConvWeightGrad cpu_conv_weight_grad() { return weight_grad().load(std::memory_order_relaxed); }
void set_cpu_conv_weight_grad(ConvWeightGrad mode) { weight_grad().store(mode, std::memory_order_relaxed); }

}  // namespace dtrain
