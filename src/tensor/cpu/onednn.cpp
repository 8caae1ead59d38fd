#include "tensor/cpu/onednn.h"

#include "dtrain/core/error.h"
#include "tensor/cpu/cpu_backend.h"

#include <omp.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

namespace dtrain::detail::onednn {
namespace {

// See onednn.h: one OpenMP thread per calling thread, set once per thread.
void use_one_openmp_thread() {
  thread_local const bool once = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)once;
}

// Every primitive and reorder runs on this. A thread's first use creates it through
// engine(), which pins the thread; the pin lasts for the thread's life.
dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

// Copies `from` into `to` (equal dims, different layouts). Operands of 1x1 kernels, and
// activations of 1x1 images, are 4-D with two trailing dimensions of size 1; such pairs are
// reordered as the 2-D matrices they are, because oneDNN 2.6 reorders the blocked weight
// gradients of 1x1 convolutions back to plain (ABcd16b16a -> abcd) in 4-D at about a sixth
// of the speed of the same bytes described in 2-D (8.6 ms against 1.4 ms for ResNet-50's
// 2048x1024 weights, one thread); the other reorders a ResNet-50 step runs took the same
// time either way (DNNL_VERBOSE, within 5%). A reshape keeps sub-memory offsets and padded
// channels; descriptors it cannot describe in 2-D (not blocked, or with extra flags) keep
// their 4-D descriptions.
void reorder_into(const dnnl::memory& from, const dnnl::memory& to) {
  dnnl::memory src = from, dst = to;
  const dnnl::memory::dims dims = from.get_desc().dims();
  if (dims.size() == 4 && dims[2] == 1 && dims[3] == 1) {
    const dnnl::memory::desc from_2d = from.get_desc().reshape({dims[0], dims[1]}, /*allow_empty=*/true);
    const dnnl::memory::desc to_2d = to.get_desc().reshape({dims[0], dims[1]}, /*allow_empty=*/true);
    if (!from_2d.is_zero() && !to_2d.is_zero()) {
      src = dnnl::memory(from_2d, engine(), from.get_data_handle());
      dst = dnnl::memory(to_2d, engine(), to.get_data_handle());
    }
  }
  dnnl::reorder(src, dst).execute(stream(), src, dst);
  stream().wait();
}

}  // namespace

const dnnl::engine& engine() {
  // Primitives size their thread split when they are created, and a split of more than
  // one thread starts an OpenMP team even on a one-thread caller: pin before creation too.
  use_one_openmp_thread();
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::memory user_memory(const dnnl::memory::desc& d, const void* data) {
  return dnnl::memory(d, engine(), const_cast<void*>(data));
}

Buffer::Buffer(std::size_t nbytes) : data_(cpu_backend().allocate(nbytes)), nbytes_(nbytes) {}
Buffer::~Buffer() { cpu_backend().deallocate(data_, nbytes_); }

void execute(const dnnl::primitive& p, std::unordered_map<int, dnnl::memory> args, const dnnl::memory::desc& scratchpad) {
  std::unique_ptr<Buffer> pad;
  if (scratchpad.get_size() > 0) {
    pad = std::make_unique<Buffer>(scratchpad.get_size());
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad, engine(), pad->data()));
  }
  p.execute(stream(), args);
  stream().wait();
}

dnnl::memory as_layout(const dnnl::memory& user, const dnnl::memory::desc& wanted, std::unique_ptr<Buffer>& storage) {
  if (user.get_desc() == wanted) return user;
  storage = std::make_unique<Buffer>(wanted.get_size());
  dnnl::memory converted(wanted, engine(), storage->data());
  reorder_into(user, converted);
  return converted;
}

dnnl::memory output_layout(const dnnl::memory& user, const dnnl::memory::desc& wanted,
                           std::unique_ptr<Buffer>& storage) {
  if (user.get_desc() == wanted) return user;
  storage = std::make_unique<Buffer>(wanted.get_size());
  return dnnl::memory(wanted, engine(), storage->data());
}

void copy_back(const dnnl::memory& from, const dnnl::memory& user) {
  if (from.get_desc() == user.get_desc()) return;
  reorder_into(from, user);
}

void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float* out, std::int64_t ldc, float beta) {
  use_one_openmp_thread();
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, out, ldc);
  DTRAIN_CHECK(status == dnnl_success, "oneDNN sgemm ({}x{}x{}) failed with status {}", m, n, k,
               static_cast<int>(status));
}

namespace {

// One bf16 product: sizes, leading dimensions and which operands are stored transposed.
struct GemmKey {
  std::int64_t m, n, k, lda, ldb, ldc;
  bool trans_a, trans_b;
  auto tie() const { return std::tie(m, n, k, lda, ldb, ldc, trans_a, trans_b); }
  bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
};

struct Bf16Matmul {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
};

// A (rows, cols) matrix stored row-major with leading dimension ld, or as its transpose.
dnnl::memory::desc matrix(std::int64_t rows, std::int64_t cols, std::int64_t ld, bool transposed,
                          dnnl::memory::data_type type) {
  return dnnl::memory::desc({rows, cols}, type, transposed ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1});
}

// Made on first use and kept: creating a matmul costs more than running a small one.
const Bf16Matmul& bf16_matmul(const GemmKey& key) {
  static std::mutex mutex;
  static std::map<GemmKey, Bf16Matmul> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    using Type = dnnl::memory::data_type;
    const dnnl::matmul::desc desc(matrix(key.m, key.k, key.lda, key.trans_a, Type::bf16),
                                  matrix(key.k, key.n, key.ldb, key.trans_b, Type::bf16),
                                  matrix(key.m, key.n, key.ldc, false, Type::f32));
    dnnl::matmul::primitive_desc pd(desc, user_scratchpad(), engine());
    it = cache.emplace(key, Bf16Matmul{pd, dnnl::matmul(pd)}).first;
  }
  return it->second;  // std::map never moves its elements
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const BFloat16* a,
               std::int64_t lda, const BFloat16* b, std::int64_t ldb, float* out, std::int64_t ldc) {
  const Bf16Matmul& mm = bf16_matmul({m, n, k, lda, ldb, ldc, trans_a, trans_b});
  execute(mm.primitive,
          {{DNNL_ARG_SRC, user_memory(mm.pd.src_desc(), a)},
           {DNNL_ARG_WEIGHTS, user_memory(mm.pd.weights_desc(), b)},
           {DNNL_ARG_DST, user_memory(mm.pd.dst_desc(), out)}},
          mm.pd.scratchpad_desc());
}

}  // namespace dtrain::detail::onednn

namespace dtrain::detail::onednn {

namespace {
// Asked once per convolution: the ISA does not change within a process.
bool has_isa(unsigned wanted) {
  static const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (isa & wanted) == wanted;
}
}  // namespace

bool has_avx512() { return has_isa(dnnl_cpu_isa_avx512_core); }

bool has_bf16_dot() { return has_isa(dnnl_cpu_isa_avx512_core_bf16); }  // AMX's value includes these bits

bool has_amx() { return has_isa(dnnl_cpu_isa_avx512_core_amx); }

}  // namespace dtrain::detail::onednn
