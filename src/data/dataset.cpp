#include "dtrain/data/dataset.h"

#include "dtrain/core/error.h"
#include "dtrain/data/sampler.h"

#include <cstring>
#include <string>

namespace dtrain::data {
namespace {

// A tensor of shape (n, ...first's shape) and first's dtype, on the CPU.
Tensor stacked_like(const Tensor& first, std::int64_t n) {
  Shape shape{n};
  shape.insert(shape.end(), first.shape().begin(), first.shape().end());
  return Tensor::empty(shape, {first.dtype(), Device::cpu()});
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return fmt::format("{} {} on {}", shape_str(t.shape()), dtype_name(t.dtype()), t.device().str());
}

// Copies `part` into row i of `out` after checking it matches `first` (shape, dtype, CPU).
void copy_row(Tensor& out, std::int64_t i, const Tensor& first, const Tensor& part, const char* what,
              std::int64_t index) {
  DTRAIN_CHECK(
      part.defined() && part.shape() == first.shape() && part.dtype() == first.dtype() && part.device().is_cpu(),
      "Dataset::get_batch: the {} of example {} is {}, expected {} like the first example's", what, index,
      describe(part), describe(first));
  const Tensor src = part.contiguous();
  const std::size_t row_bytes = src.nbytes();
  std::memcpy(static_cast<char*>(out.raw_data()) + static_cast<std::size_t>(i) * row_bytes, src.raw_data(), row_bytes);
}

}  // namespace

Dataset::~Dataset() = default;

Batch Dataset::get_batch(const std::vector<std::int64_t>& indices) const {
  DTRAIN_CHECK(!indices.empty(), "Dataset::get_batch: expected at least one index");
  const auto n = static_cast<std::int64_t>(indices.size());
  Example first = get(indices[0]);
  DTRAIN_CHECK(first.input.defined() && first.target.defined() && first.input.device().is_cpu() &&
                   first.target.device().is_cpu(),
               "Dataset::get_batch: example {} has input {} and target {}, expected defined CPU tensors", indices[0],
               describe(first.input), describe(first.target));
  Batch batch{stacked_like(first.input, n), stacked_like(first.target, n)};
  for (std::int64_t i = 0; i < n; ++i) {
    Example ex = i == 0 ? first : get(indices[i]);
    copy_row(batch.inputs, i, first.input, ex.input, "input", indices[i]);
    copy_row(batch.targets, i, first.target, ex.target, "target", indices[i]);
  }
  return batch;
}

Batch Dataset::get_epoch_batch(const std::vector<std::int64_t>& indices, std::int64_t /*epoch*/) const {
  return get_batch(indices);
}

std::int64_t Dataset::bad_samples_skipped() const { return 0; }

std::shared_ptr<const Sampler> Dataset::rank_sampler(int, int, std::uint64_t, bool) const { return nullptr; }

bool Dataset::shares_keep_global_order() const { return true; }

}  // namespace dtrain::data
