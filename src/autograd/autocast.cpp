#include "dtrain/autograd/autocast.h"

#include "dtrain/core/error.h"

namespace dtrain {
namespace {
thread_local std::optional<DType> current;
}  // namespace

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : previous_(current) {
  DTRAIN_CHECK(is_half(dtype), "AutocastGuard: expected f16 or bf16, got {}", dtype_name(dtype));
  current = enabled ? std::optional<DType>(dtype) : std::nullopt;
}

AutocastGuard::~AutocastGuard() { current = previous_; }

std::optional<DType> autocast_dtype() { return current; }

}  // namespace dtrain
