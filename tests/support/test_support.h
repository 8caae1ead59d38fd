// Helpers shared by the tests of every module.
#pragma once

#include "dtrain/autograd/fusion.h"
#include "dtrain/autograd/grad_check.h"
#include "dtrain/core/parallel.h"
#include "dtrain/tensor/cpu_kernels.h"
#include "dtrain/tensor/ops.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::test {

// A tensor of uniform values in [low, high) from a fixed seed (f32 or f64).
Tensor random_tensor(const Shape& shape, std::uint64_t seed, DType dtype = DType::f32, double low = -1,
                     double high = 1);

// Fails the current test with both tensors printed unless shapes match and every element
// satisfies |a - b| <= atol + rtol * |b|.
void require_close(const Tensor& actual, const Tensor& expected, double rtol = 1e-5, double atol = 1e-6);

// Runs grad_check and fails the test with its report on a mismatch.
void require_grad_ok(const std::function<Variable(const std::vector<Variable>&)>& f,
                     const std::vector<Variable>& inputs, double eps = 1e-6, double atol = 1e-5, double rtol = 1e-4);

// The convolutions every device's gradient checks run: plain, strided and padded,
// asymmetric with dilation, grouped.
struct ConvGradCase {
  Shape x, w;
  Conv2dParams p;
};
const std::vector<ConvGradCase>& conv_grad_cases();

// Sets whether CPU activations are held in the blocked layout (dtrain/tensor/cpu_kernels.h)
// and restores that switch and the thread count, which tests of the layout also change.
struct CpuLayoutSwitch {
  bool was = cpu_blocked_layout();
  int threads = num_threads();
  explicit CpuLayoutSwitch(bool enabled) { set_cpu_blocked_layout(enabled); }
  ~CpuLayoutSwitch() {
    set_cpu_blocked_layout(was);
    set_num_threads(threads);
  }
  CpuLayoutSwitch(const CpuLayoutSwitch&) = delete;
  CpuLayoutSwitch& operator=(const CpuLayoutSwitch&) = delete;
};

// Sets one of the CPU kernel switches (cpu_kernels.h) and restores it.
template <class Mode, Mode (*Get)(), void (*Set)(Mode)>
struct KernelSwitch {
  Mode was = Get();
  explicit KernelSwitch(Mode mode) { Set(mode); }
  ~KernelSwitch() { Set(was); }
  KernelSwitch(const KernelSwitch&) = delete;
  KernelSwitch& operator=(const KernelSwitch&) = delete;
};
// How f32 convolutions compute weight gradients.
using ConvWeightGradSwitch = KernelSwitch<ConvWeightGrad, cpu_conv_weight_grad, set_cpu_conv_weight_grad>;
// How bf16 products run: oneDNN's bf16 kernels or the exact emulation.
using Bf16ProductsSwitch = KernelSwitch<Bf16Products, cpu_bf16_products, set_cpu_bf16_products>;
// Whether 3x3 convolutions run direct or Winograd kernels.
using ConvAlgorithmSwitch = KernelSwitch<ConvAlgorithm, cpu_conv_algorithm, set_cpu_conv_algorithm>;
// Whether differentiable ops run their fused kernels or the composed ops (fusion.h).
using FusedKernelsSwitch = KernelSwitch<bool, fused_kernels, set_fused_kernels>;

// Marks the running test case skipped and says why (defined with the Catch session, in
// tests/catch_impl.cpp). ctest reports the case as skipped unless it also failed.
void skip_test_case(const std::string& reason);

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Sets an environment variable (nullptr: unsets it) for one scope, and puts back what was
// there on destruction; set() changes it again within the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void set(const char* value);

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Writes bytes to a file (creating parents).
void write_file(const std::filesystem::path& path, const std::string& bytes);

// What `f` throws as a dtrain::Error, or "" when it returns.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace dtrain::test
