#include "tensor/cpu/blocked_layout.h"

#include "dtrain/core/parallel.h"
#include "dtrain/tensor/cpu_kernels.h"


namespace dtrain::detail::onednn {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

memory::desc images_desc(const Shape& shape, std::int64_t n, Tag tag) {
  return memory::desc({n, shape[1], shape[2], shape[3]}, memory::data_type::f32, tag);
}

std::int64_t block_of(Tag tag) { return tag == Tag::nChw16c ? 16 : 8; }

}  // namespace

BlockedActivation::BlockedActivation(const Shape& shape, Tag tag)
    : shape_(shape), tag_(tag), buffer_(static_cast<std::size_t>(shape_numel(shape)) * sizeof(float)) {}

memory BlockedActivation::images(std::int64_t n0, std::int64_t n) const {
  const std::int64_t image = shape_[1] * shape_[2] * shape_[3];  // blocks fill the channels: no padding
  return memory(images_desc(shape_, n, tag_), engine(), floats() + n0 * image);
}

void BlockedActivation::write_plain(void* plain) const {
  const std::int64_t batch = shape_[0], image = shape_[1] * shape_[2] * shape_[3];
  // One reorder per slice of images, across the pool (inline when called inside it).
  parallel_for(0, batch, std::max<std::int64_t>(1, batch / num_threads()), [&](std::int64_t n0, std::int64_t n1) {
    memory from = images(n0, n1 - n0);
    memory to(images_desc(shape_, n1 - n0, Tag::nchw), engine(), static_cast<float*>(plain) + n0 * image);
    copy_back(from, to);
  });
}

std::shared_ptr<const BlockedActivation> blocked_of(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || t.dtype() != DType::f32 || t.dim() != 4 || t.offset() != 0 ||
      !t.is_contiguous()) {
    return nullptr;
  }
  auto blocked = std::dynamic_pointer_cast<const BlockedActivation>(t.storage()->layout());
  return blocked && blocked->shape() == t.shape() ? blocked : nullptr;
}

std::optional<Tag> blocked_tag(const memory::desc& desc) {
  const memory::dims dims = desc.dims();
  if (dims.size() != 4) return std::nullopt;
  for (Tag tag : {Tag::nChw8c, Tag::nChw16c}) {
    if (dims[1] % block_of(tag) == 0 && desc == memory::desc(dims, desc.data_type(), tag)) return tag;
  }
  return std::nullopt;
}

bool may_block(const Tensor& out) {
  return cpu_blocked_layout() && out.defined() && out.device().is_cpu() && out.dtype() == DType::f32 &&
         out.dim() == 4 && out.offset() == 0 && out.is_contiguous() && !out.storage()->pinned() &&
         out.storage().use_count() == 1 && out.nbytes() == out.storage()->nbytes();
}

const float* plain_floats(const Tensor& t, std::unique_ptr<Buffer>& copy) {
  const auto blocked = blocked_of(t);
  if (!blocked) return t.data<float>();
  copy = std::make_unique<Buffer>(static_cast<std::size_t>(t.numel()) * sizeof(float));
  blocked->write_plain(copy->data());
  return static_cast<const float*>(copy->data());
}

void hand_over(Tensor& out, std::shared_ptr<const BlockedActivation> blocked) {
  out.storage()->replace_with_layout(std::move(blocked));
}

}  // namespace dtrain::detail::onednn
