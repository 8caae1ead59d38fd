// oneDNN (Debian's libdnnl) runs dtrain's f32 convolutions and GEMMs on the CPU: its JIT
// kernels pick the widest vector ISA of the machine at run time (AVX2 or AVX-512), so a
// portable dtrain build still gets them. f64 stays on the Eigen path (gradient checks).
//
// Threading: dtrain's own blocking pool splits the work and every oneDNN call runs on one
// thread. Debian's oneDNN uses OpenMP, whose idle threads spin; on shared 2-vCPU machines
// spinning pools collapse (DESIGN.md), and OMP_WAIT_POLICY is read before main() runs, so
// instead no OpenMP team is ever started: each calling thread's OpenMP thread count is 1.
// Primitives run with user-provided scratchpads, so that several threads may execute them
// at once (the library's shared scratchpad is not safe for that).
#pragma once

#include "dtrain/tensor/half.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <memory>
#include <unordered_map>

namespace dtrain::detail::onednn {

// The CPU engine; every use of oneDNN goes through it, so it also pins the calling thread
// to one OpenMP thread.
const dnnl::engine& engine();

// A block of CPU memory from dtrain's allocator, for reordered operands and scratchpads.
class Buffer {
 public:
  explicit Buffer(std::size_t nbytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return data_; }

 private:
  void* data_;
  std::size_t nbytes_;
};

// Attributes for a primitive that execute() runs: its scratchpad comes from the caller.
dnnl::primitive_attr user_scratchpad();

// The caller's memory at `data`, described by `d` (a primitive's operand or result).
dnnl::memory user_memory(const dnnl::memory::desc& d, const void* data);

// Runs `p` on the calling thread, one OpenMP thread, with a scratchpad of `scratchpad`
// bytes; `args` must not name DNNL_ARG_SCRATCHPAD.
void execute(const dnnl::primitive& p, std::unordered_map<int, dnnl::memory> args, const dnnl::memory::desc& scratchpad);

// `user` (plain layout, caller's memory) as the layout `wanted`: the same memory when the
// layouts match, else a reordered copy in `storage`. For operands the primitive reads.
dnnl::memory as_layout(const dnnl::memory& user, const dnnl::memory::desc& wanted, std::unique_ptr<Buffer>& storage);

// Where a primitive writes an output the caller wants in `user`'s layout: `user` itself
// when the layouts match, else a buffer in `storage`, to be copied back with copy_back.
dnnl::memory output_layout(const dnnl::memory& user, const dnnl::memory::desc& wanted,
                           std::unique_ptr<Buffer>& storage);

// Copies `from` into the caller's `user` memory when they differ (a primitive's output).
void copy_back(const dnnl::memory& from, const dnnl::memory& user);

// out(m, n) = op(a)(m, k) @ op(b)(k, n) + beta * out, row-major with leading dimensions,
// on this thread.
void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float* out, std::int64_t ldc, float beta = 0.0f);

// The same product of bf16 operands, summed in f32 into an f32 out (beta 0), through a
// oneDNN matmul made for these sizes and strides on first use. Only where has_bf16_dot().
void gemm_bf16(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const BFloat16* a,
               std::int64_t lda, const BFloat16* b, std::int64_t ldb, float* out, std::int64_t ldc);

// Whether oneDNN dispatches AVX-512 kernels on this machine.
bool has_avx512();

// Whether oneDNN dispatches kernels with bf16 dot-product instructions here (AVX-512 BF16,
// or AMX); without them its bf16 primitives would run its reference code.
bool has_bf16_dot();

// Whether oneDNN dispatches AMX tile kernels here (bf16 and int8 matrix units).
bool has_amx();

}  // namespace dtrain::detail::onednn
