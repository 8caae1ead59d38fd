#include "tensor/cpu/onednn.h"

#include "dtrain/core/error.h"
#include "tensor/cpu/cpu_backend.h"

#include <omp.h>

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

}  // namespace

const dnnl::engine& engine() {
  // Primitives size their thread split when they are created, and a split of more than
  // one thread starts an OpenMP team even on a one-thread caller: pin before creation too.
  use_one_openmp_thread();
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
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
  dnnl::reorder(user, converted).execute(stream(), const_cast<dnnl::memory&>(user), converted);
  stream().wait();
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
  dnnl::reorder(from, user).execute(stream(), const_cast<dnnl::memory&>(from), const_cast<dnnl::memory&>(user));
  stream().wait();
}

void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float* out, std::int64_t ldc, float beta) {
  use_one_openmp_thread();
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, out, ldc);
  DTRAIN_CHECK(status == dnnl_success, "oneDNN sgemm ({}x{}x{}) failed with status {}", m, n, k,
               static_cast<int>(status));
}

}  // namespace dtrain::detail::onednn

namespace dtrain::detail::onednn {

bool has_avx512() {
  // Asked once per convolution's weight gradient: the ISA does not change within a process.
  static const bool avx512 = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
  }();
  return avx512;
}

}  // namespace dtrain::detail::onednn
