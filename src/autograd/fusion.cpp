#include "dtrain/autograd/fusion.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace dtrain {
namespace {

std::atomic<bool>& fused_enabled() {
  static std::atomic<bool> enabled = [] {
    const char* v = std::getenv("DTRAIN_FUSED");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

}  // namespace

bool fused_kernels() { return fused_enabled().load(std::memory_order_relaxed); }
void set_fused_kernels(bool enabled) { fused_enabled().store(enabled, std::memory_order_relaxed); }

}  // namespace dtrain
