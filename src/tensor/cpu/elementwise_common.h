// Shared by the CPU element-wise files (unary.cpp, binary.cpp): the dtype dispatch for a
// functor and the path for blocked (oneDNN-layout) activations. The element-wise primitives
// are split over several files because together they instantiate every functor for every
// dtype: one file took two minutes at -O3 and was the build's critical path.
#pragma once

#include "tensor/cpu/blocked_layout.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided_loop.h"
#include "tensor/functors.h"

namespace dtrain::detail::cpu {

// Calls f(type_tag<T>) for the dtype, over all dtypes when the functor is defined on
// integers and over the floating ones otherwise (the ops layer has checked which).
template <class Functor, class F>
void dispatch_for(DType dtype, F&& f) {
  if constexpr (Functor::kIntegers) dispatch_dtype(dtype, f);
  else dispatch_floating(dtype, Functor::kName, f);
}

// Element-wise ops on blocked activations (blocked_layout.h): when every input holds the
// same blocked layout, has out's shape and out may be handed over so, the op runs position
// by position on the blocked bytes into a new blocked output, and returns true. (The old
// bytes are read from their own buffer, so this holds for out == an input too.)
using onednn::BlockedActivation;

inline std::shared_ptr<BlockedActivation> blocked_result(Tensor& out, const BlockedActivation* a,
                                                         const BlockedActivation* b) {
  if (a == nullptr || (b != nullptr && !b->same_layout(*a)) || a->shape() != out.shape() || !onednn::may_block(out)) {
    return nullptr;
  }
  return std::make_shared<BlockedActivation>(out.shape(), a->tag());
}

template <class Functor>
bool unary_blocked(Functor f, const Tensor& x, Tensor& out) {
  const auto bx = onednn::blocked_of(x);
  const auto result = blocked_result(out, bx.get(), nullptr);
  if (!result) return false;
  const float* in = bx->floats();
  float* o = result->floats();
  parallel_for(0, out.numel(), cpu::kGrain,
               [&](std::int64_t b, std::int64_t e) { cpu::map_contiguous(e - b, o + b, f, in + b); });
  onednn::hand_over(out, result);
  return true;
}

template <class Functor>
bool binary_blocked(Functor f, const Tensor& a, const Tensor& b, Tensor& out) {
  const auto ba = onednn::blocked_of(a), bb = onednn::blocked_of(b);
  if (!bb) return false;
  const auto result = blocked_result(out, ba.get(), bb.get());
  if (!result) return false;
  const float *x = ba->floats(), *y = bb->floats();
  float* o = result->floats();
  parallel_for(0, out.numel(), cpu::kGrain,
               [&](std::int64_t s, std::int64_t e) { cpu::map_contiguous(e - s, o + s, f, x + s, y + s); });
  onednn::hand_over(out, result);
  return true;
}

}  // namespace dtrain::detail::cpu
