// f32 activations in oneDNN's blocked-channel layout (nChw8c with AVX2, nChw16c with
// AVX-512: channel blocks of 8 or 16 innermost, images outermost), held as a Storage's
// StorageLayout. A convolution writes its output this way when oneDNN prefers it; ReLU,
// other element-wise ops on equal layouts, additions and batch norm read and write it as
// it is; anything else reads the plain bytes through Storage::data(), which reorders once.
// Only whole tensors whose channels fill whole blocks are held so, so the blocked bytes
// are exactly numel() floats and element-wise ops can run on them position by position.
#pragma once

#include "tensor/cpu/onednn.h"

#include "dtrain/tensor/storage.h"
#include "dtrain/tensor/tensor.h"

#include <memory>
#include <optional>
#include <type_traits>

namespace dtrain::detail::onednn {

class BlockedActivation final : public StorageLayout {
 public:
  // A (n, c, h, w) f32 tensor's worth of uninitialized memory in the blocked format `tag`.
  BlockedActivation(const Shape& shape, dnnl::memory::format_tag tag);
  void* data() const override { return buffer_.data(); }
  void write_plain(void* plain) const override;

  float* floats() const { return static_cast<float*>(buffer_.data()); }
  dnnl::memory::format_tag tag() const { return tag_; }
  const Shape& shape() const { return shape_; }
  bool same_layout(const BlockedActivation& other) const { return tag_ == other.tag_ && shape_ == other.shape_; }
  // Images [n0, n0 + n) as oneDNN memory, for a primitive made for a batch of n.
  dnnl::memory images(std::int64_t n0, std::int64_t n) const;

 private:
  Shape shape_;
  dnnl::memory::format_tag tag_;
  Buffer buffer_;
};

// t's blocked bytes, when t is a whole f32 CPU tensor whose storage still holds them.
std::shared_ptr<const BlockedActivation> blocked_of(const Tensor& t);

// The blocked format of `desc` (of any data type: a bf16 primitive's f32 results are held
// in the same format) when it is one this file handles and the channels fill whole blocks.
std::optional<dnnl::memory::format_tag> blocked_tag(const dnnl::memory::desc& desc);

// Whether a kernel may hand `out` over in the blocked layout: blocked layouts are on, and
// out is a fresh, whole, contiguous 4-D f32 CPU tensor that nothing else shares.
bool may_block(const Tensor& out);

// t's values in plain NCHW for reading: its plain bytes, or when it holds blocked ones, a
// plain copy in `copy` that leaves t blocked for the kernels that read it later
// (Storage::data() would make it plain for good).
const float* plain_floats(const Tensor& t, std::unique_ptr<Buffer>& copy);

// Hands `out`'s bytes over to `blocked` (see Storage::replace_with_layout).
void hand_over(Tensor& out, std::shared_ptr<const BlockedActivation> blocked);

// Runs f(std::integral_constant<int, B>{}) for the layout's block size B, so that kernels
// loop over a compile-time number of lanes.
template <class F>
void with_block(const BlockedActivation& blocked, F f) {
  if (blocked.tag() == dnnl::memory::format_tag::nChw16c) f(std::integral_constant<int, 16>{});
  else f(std::integral_constant<int, 8>{});
}

}  // namespace dtrain::detail::onednn
