#include "support/test_support.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <random>
#include <unistd.h>

namespace dtrain::test {

Tensor random_tensor(const Shape& shape, std::uint64_t seed, DType dtype, double low, double high) {
  Tensor t = Tensor::empty(shape, {dtype, Device::cpu()});
  Generator gen(seed);
  uniform_(t, low, high, &gen);
  return t;
}

void require_close(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  INFO("actual:   " << actual.str());
  INFO("expected: " << expected.str());
  REQUIRE(actual.shape() == expected.shape());
  auto a = actual.to_vector<double>();
  auto b = expected.to_vector<double>();
  // One assertion, at the first element out of tolerance (a NaN fails the comparison): a
  // message and an assertion per element made large tensors slow, minutes under ASan.
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::abs(a[i] - b[i]) <= atol + rtol * std::abs(b[i])) continue;
    INFO("element " << i << ": " << a[i] << " vs " << b[i]);
    REQUIRE(std::abs(a[i] - b[i]) <= atol + rtol * std::abs(b[i]));
  }
  SUCCEED("all " << a.size() << " elements within tolerance");
}

void require_grad_ok(const std::function<Variable(const std::vector<Variable>&)>& f,
                     const std::vector<Variable>& inputs, double eps, double atol, double rtol) {
  GradCheckResult r = grad_check(f, inputs, eps, atol, rtol);
  INFO(r.report);
  REQUIRE(r.ok);
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          ("dtrain-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

const std::vector<ConvGradCase>& conv_grad_cases() {
  static const std::vector<ConvGradCase> cases = {
      {{2, 3, 6, 6}, {4, 3, 3, 3}, {}},
      {{1, 2, 7, 7}, {3, 2, 3, 3}, {2, 2, 1, 1, 1, 1, 1}},
      {{1, 2, 7, 6}, {2, 2, 3, 2}, {1, 1, 2, 1, 2, 2, 1}},
      {{1, 4, 5, 5}, {4, 2, 3, 3}, {1, 1, 1, 1, 1, 1, 2}},
  };
  return cases;
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old;
  set(value);
}

ScopedEnv::~ScopedEnv() { set(old_ ? old_->c_str() : nullptr); }

void ScopedEnv::set(const char* value) {
  if (value != nullptr) ::setenv(name_, value, 1);
  else ::unsetenv(name_);
}

}  // namespace dtrain::test
