#include "comm/mpi/algorithms/halving_doubling.h"

#include "comm/mpi/transport/mpi_runtime.h"
#include "comm/mpi/transport/byte_messages.h"
#include "dtrain/comm/partition.h"
#include "comm/reduce_kernels.h"

#include <algorithm>

namespace dtrain::dist::mpi {
HalvingDoubling::HalvingDoubling(MPI_Comm comm) {
  check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  while (pof2_ * 2 <= size_) pof2_ *= 2;
}

HalvingDoubling::~HalvingDoubling() { MPI_Comm_free(&comm_); }

std::byte* HalvingDoubling::scratch(std::size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

int HalvingDoubling::real_rank(int folded_rank) const {
  const int rem = size_ - pof2_;
  return folded_rank < rem ? 2 * folded_rank + 1 : folded_rank + rem;
}

int HalvingDoubling::fold_in(std::byte* data, std::size_t count, DType dtype, ReduceOp op) {
  const int rem = size_ - pof2_;
  if (rank_ >= 2 * rem) return rank_ - rem;
  const std::size_t bytes = count * dtype_size(dtype);
  if (rank_ % 2 == 0) {
    exchange(data, bytes, nullptr, 0, rank_ + 1, comm_, "recursive halving (fold)");
    return -1;
  }
  std::byte* other = scratch(bytes);
  exchange(nullptr, 0, other, bytes, rank_ - 1, comm_, "recursive halving (fold)");
  combine(data, other, data, count, dtype, op);  // the lower rank's operand first, as everywhere
  return rank_ / 2;
}

void HalvingDoubling::fold_out(std::byte* data, std::size_t bytes, int folded_rank) {
  if (rank_ >= 2 * (size_ - pof2_)) return;
  if (folded_rank >= 0) exchange(data, bytes, nullptr, 0, rank_ - 1, comm_, "recursive halving (unfold)");
  else exchange(nullptr, 0, data, bytes, rank_ + 1, comm_, "recursive halving (unfold)");
}

void HalvingDoubling::recursive_doubling(void* data, std::size_t count, DType dtype, ReduceOp op) {
  if (size_ == 1 || count == 0) return;
  auto* base = static_cast<std::byte*>(data);
  const std::size_t bytes = count * dtype_size(dtype);
  const int me = fold_in(base, count, dtype, op);
  if (me >= 0) {
    std::byte* other = scratch(bytes);
    for (int mask = 1; mask < pof2_; mask <<= 1) {
      const int partner = me ^ mask;
      exchange(base, bytes, other, bytes, real_rank(partner), comm_, "recursive doubling");
      // Both partners combine in the same operand order, so they hold the same bits even
      // where an op is not symmetric (a max against a NaN).
      if (me < partner) combine(base, base, other, count, dtype, op);
      else combine(base, other, base, count, dtype, op);
    }
  }
  fold_out(base, bytes, me);
}

void HalvingDoubling::rabenseifner(void* data, std::size_t count, DType dtype, ReduceOp op) {
  if (size_ == 1 || count == 0) return;
  auto* base = static_cast<std::byte*>(data);
  const std::size_t esize = dtype_size(dtype);
  const int me = fold_in(base, count, dtype, op);
  if (me >= 0) {
    // Reduce-scatter by recursive halving: each step keeps half of the range left and
    // reduces the partner's copy of that half into it; the last range is this rank's.
    struct Step {
      Range whole;
      bool low;  // kept the lower half
    };
    std::vector<Step> steps;
    Range mine{0, count};
    std::byte* other = scratch((count / 2 + 1) * esize);
    for (int mask = 1; mask < pof2_; mask <<= 1) {
      const bool low = (me & mask) == 0;
      const std::size_t mid = mine.begin + mine.size() / 2;
      const Range keep = low ? Range{mine.begin, mid} : Range{mid, mine.end};
      const Range give = low ? Range{mid, mine.end} : Range{mine.begin, mid};
      exchange(base + give.begin * esize, give.size() * esize, other, keep.size() * esize, real_rank(me ^ mask), comm_,
               "rabenseifner reduce-scatter");
      std::byte* target = base + keep.begin * esize;
      combine(target, target, other, keep.size(), dtype, op);  // owned by this rank alone from now on
      steps.push_back({mine, low});
      mine = keep;
    }
    // All-gather by recursive doubling, the steps in reverse: the partner holds the other
    // half of the range both shared before the matching halving step.
    for (int mask = pof2_ / 2; mask >= 1; mask >>= 1) {
      const Step step = steps.back();
      steps.pop_back();
      const Range theirs = step.low ? Range{mine.end, step.whole.end} : Range{step.whole.begin, mine.begin};
      exchange(base + mine.begin * esize, mine.size() * esize, base + theirs.begin * esize, theirs.size() * esize,
               real_rank(me ^ mask), comm_, "rabenseifner all-gather");
      mine = step.whole;
    }
  }
  fold_out(base, count * esize, me);
}

}  // namespace dtrain::dist::mpi
