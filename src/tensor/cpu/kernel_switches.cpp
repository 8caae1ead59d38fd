// The switches of dtrain/tensor/cpu_kernels.h: process-wide, read from the environment once.
#include "dtrain/core/environment.h"
#include "dtrain/core/error.h"
#include "dtrain/tensor/cpu_kernels.h"
#include "tensor/cpu/onednn.h"

#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

namespace dtrain {
namespace {

std::atomic<bool>& blocked_enabled() {
  static std::atomic<bool> enabled{env::get_int("DTRAIN_CPU_BLOCKED").value_or(1) != 0};
  return enabled;
}

// Environment variable `name` as one of `choices` (the first when unset or empty).
template <class Mode, std::size_t N>
Mode from_environment(const char* name, const std::pair<const char*, Mode> (&choices)[N]) {
  const std::optional<std::string> value = env::get(name);
  if (!value || value->empty()) return choices[0].second;
  std::string expected;
  for (std::size_t i = 0; i < N; ++i) {
    if (*value == choices[i].first) return choices[i].second;
    expected += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + choices[i].first;
  }
  DTRAIN_FAIL("environment variable {}={}: expected {}", name, *value, expected);
}

std::atomic<ConvWeightGrad>& weight_grad() {
  static std::atomic<ConvWeightGrad> mode{from_environment<ConvWeightGrad>(
      "DTRAIN_CONV_WEIGHT_GRAD",
      {{"auto", ConvWeightGrad::Auto}, {"direct", ConvWeightGrad::Direct}, {"gemm", ConvWeightGrad::Gemm}})};
  return mode;
}

std::atomic<ConvAlgorithm>& conv_algorithm() {
  static std::atomic<ConvAlgorithm> mode{from_environment<ConvAlgorithm>(
      "DTRAIN_CPU_CONV_ALGO",
      {{"auto", ConvAlgorithm::Auto}, {"direct", ConvAlgorithm::Direct}, {"winograd", ConvAlgorithm::Winograd}})};
  return mode;
}

std::atomic<Bf16Products>& bf16_products() {
  static std::atomic<Bf16Products> mode{from_environment<Bf16Products>(
      "DTRAIN_CPU_BF16",
      {{"auto", Bf16Products::Auto}, {"native", Bf16Products::Native}, {"emulate", Bf16Products::Emulated}})};
  return mode;
}

}  // namespace

bool cpu_blocked_layout() { return blocked_enabled().load(std::memory_order_relaxed); }
void set_cpu_blocked_layout(bool enabled) { blocked_enabled().store(enabled, std::memory_order_relaxed); }

ConvWeightGrad cpu_conv_weight_grad() { return weight_grad().load(std::memory_order_relaxed); }
void set_cpu_conv_weight_grad(ConvWeightGrad mode) { weight_grad().store(mode, std::memory_order_relaxed); }

ConvAlgorithm cpu_conv_algorithm() { return conv_algorithm().load(std::memory_order_relaxed); }
void set_cpu_conv_algorithm(ConvAlgorithm mode) { conv_algorithm().store(mode, std::memory_order_relaxed); }
bool cpu_has_winograd() { return detail::onednn::has_avx512(); }

Bf16Products cpu_bf16_products() { return bf16_products().load(std::memory_order_relaxed); }
void set_cpu_bf16_products(Bf16Products mode) { bf16_products().store(mode, std::memory_order_relaxed); }

bool cpu_has_bf16_dot() { return detail::onednn::has_bf16_dot(); }

bool cpu_native_bf16() {
  switch (cpu_bf16_products()) {
    case Bf16Products::Auto: return detail::onednn::has_amx();
    case Bf16Products::Native: return cpu_has_bf16_dot();
    case Bf16Products::Emulated: return false;
  }
  return false;
}

}  // namespace dtrain
