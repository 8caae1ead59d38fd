// CPU memory: 64-byte aligned blocks (a full cache line and AVX-512 vector) and plain
// memcpy transfers, since CPU memory is host memory.
#include "tensor/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace dtrain::detail {
namespace {
constexpr std::size_t kAlignment = 64;
}

void* CpuBackend::allocate(std::size_t nbytes) {
  std::size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  DTRAIN_CHECK(ptr != nullptr, "out of CPU memory allocating {} bytes", nbytes);
  return ptr;
}

void CpuBackend::deallocate(void* ptr, std::size_t) { std::free(ptr); }

void CpuBackend::copy_to_host(const void* src, void* dst, std::size_t nbytes) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}

void CpuBackend::copy_from_host(const void* src, void* dst, std::size_t nbytes) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}

Backend& cpu_backend() {
  static CpuBackend instance;
  return instance;
}

}  // namespace dtrain::detail
