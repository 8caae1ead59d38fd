// 2-D convolution through oneDNN: forward, backward-data and backward-weights primitives
// in the layouts oneDNN prefers for this machine (blocked channels: nChw8c with AVX2,
// nChw16c with AVX-512), by direct or Winograd kernels (cpu_kernels.h, ConvAlgorithm).
// Operands are f32, or bf16 (autocast on a CPU with bf16 dot-product instructions,
// cpu_kernels.h): then the primitives multiply in bf16 and sum
// in f32, write activations and input gradients rounded to bf16 (as cuDNN does) and weight
// gradients in f32; every result lands in an f32 tensor. Activations that arrive in that layout
// (blocked_layout.h) are read as they are, and outputs in it are handed on that way, so a
// chain of convolutions, ReLUs, additions and batch norms reorders nothing; plain NCHW
// tensors are reordered in and out around the call. The batch is split across dtrain's
// pool; each thread runs primitives made for its slice. Primitive descriptors and
// primitives are cached per shape: creating them costs more than running a small
// convolution.
#include "tensor/cpu/onednn_conv.h"

#include "dtrain/core/parallel.h"
#include "dtrain/tensor/cpu_kernels.h"
#include "tensor/cpu/blocked_layout.h"
#include "tensor/cpu/onednn.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace dtrain::detail::onednn {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;
constexpr auto kBF16 = memory::data_type::bf16;

// One convolution problem: the geometry of a batch slice of `n` images, the operands' type
// (f32 or bf16), and whether to ask for Winograd kernels.
struct ConvKey {
  std::int64_t n, c, h, w, o, kh, kw, oh, ow;
  Conv2dParams p;
  bool bias;
  memory::data_type operands;
  bool winograd;
  auto tie() const {
    return std::tie(n, c, h, w, o, kh, kw, oh, ow, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h,
                    p.dilation_w, p.groups, bias, operands, winograd);
  }
  bool operator<(const ConvKey& k) const { return tie() < k.tie(); }
};

// The user's plain layouts: of tensors a primitive reads, in the operands' type; of those
// it writes (the `_out` ones), in f32.
struct ConvDescs {
  memory::desc src, weights, dst;
  memory::desc src_out, weights_out, dst_out, bias;
  memory::dims strides, dilates, pad_l, pad_r;
};

ConvDescs describe(const ConvKey& k) {
  ConvDescs d;
  const std::int64_t g = k.p.groups;
  const auto images = [](const memory::dims& dims, memory::data_type type) {
    return memory::desc(dims, type, Tag::nchw);
  };
  const auto weights = [&](memory::data_type type) {
    return g == 1 ? memory::desc({k.o, k.c, k.kh, k.kw}, type, Tag::oihw)
                  : memory::desc({g, k.o / g, k.c / g, k.kh, k.kw}, type, Tag::goihw);
  };
  d.src = images({k.n, k.c, k.h, k.w}, k.operands);
  d.dst = images({k.n, k.o, k.oh, k.ow}, k.operands);
  d.weights = weights(k.operands);
  d.src_out = images({k.n, k.c, k.h, k.w}, kF32);
  d.dst_out = images({k.n, k.o, k.oh, k.ow}, kF32);
  d.weights_out = weights(kF32);
  if (k.bias) d.bias = memory::desc({k.o}, kF32, Tag::x);
  d.strides = {k.p.stride_h, k.p.stride_w};
  d.dilates = {k.p.dilation_h - 1, k.p.dilation_w - 1};  // oneDNN counts dilation from 0
  d.pad_l = {k.p.pad_h, k.p.pad_w};
  // The right/bottom padding that yields exactly (oh, ow); may differ from the left.
  d.pad_r = {(k.oh - 1) * k.p.stride_h + (k.kh - 1) * k.p.dilation_h + 1 - k.h - k.p.pad_h,
             (k.ow - 1) * k.p.stride_w + (k.kw - 1) * k.p.dilation_w + 1 - k.w - k.p.pad_w};
  return d;
}

// d's dims and type in the layout the primitive prefers.
memory::desc any(const memory::desc& d) { return memory::desc(d.dims(), d.data_type(), Tag::any); }

dnnl::convolution_forward::primitive_desc forward_pd(const ConvKey& k, const ConvDescs& d, dnnl::algorithm alg) {
  const memory::desc bias = k.bias ? any(d.bias) : memory::desc();
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training, alg, any(d.src), any(d.weights), bias,
                                       any(d.dst), d.strides, d.dilates, d.pad_l, d.pad_r);
  return {desc, user_scratchpad(), engine()};
}

// The three primitives of one problem, made on first use.
struct ConvPrimitives {
  ConvDescs descs;
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd;
  dnnl::convolution_backward_weights bwd_weights;
};

// The three primitives, all by algorithm `alg`; throws dnnl::error (unimplemented) where
// oneDNN has no kernel of that algorithm for the problem on this CPU.
ConvPrimitives make_primitives(const ConvKey& k, dnnl::algorithm alg) {
  ConvPrimitives c;
  const ConvDescs& d = c.descs = describe(k);
  c.fwd_pd = forward_pd(k, d, alg);
  c.fwd = dnnl::convolution_forward(c.fwd_pd);
  dnnl::convolution_backward_data::desc bd(alg, any(d.src), any(d.weights), any(d.dst), d.strides, d.dilates,
                                           d.pad_l, d.pad_r);
  c.bwd_data_pd = {bd, user_scratchpad(), engine(), c.fwd_pd};
  c.bwd_data = dnnl::convolution_backward_data(c.bwd_data_pd);
  // Weight gradients in f32 even from bf16 operands: the batch slices' partial sums are
  // added before anything rounds them.
  dnnl::convolution_backward_weights::desc bw(alg, any(d.src), any(d.weights_out), any(d.dst), d.strides,
                                              d.dilates, d.pad_l, d.pad_r);
  c.bwd_weights_pd = {bw, user_scratchpad(), engine(), c.fwd_pd};
  c.bwd_weights = dnnl::convolution_backward_weights(c.bwd_weights_pd);
  return c;
}

// Winograd kernels where asked for and oneDNN has them for the problem (AVX-512, 3x3,
// stride 1, padding of at most 1, ...: it checks), else direct ones.
ConvPrimitives make_primitives(const ConvKey& k) {
  if (k.winograd) {
    try {
      return make_primitives(k, dnnl::algorithm::convolution_winograd);
    } catch (const dnnl::error& e) {
      if (e.status != dnnl_unimplemented) throw;
    }
  }
  return make_primitives(k, dnnl::algorithm::convolution_direct);
}

// Whether to ask for Winograd kernels (cpu_kernels.h, ConvAlgorithm) for a slice of n images
// of the problem x * w -> out: only for f32 products of ungrouped, undilated 3x3 kernels of
// stride 1 (oneDNN's F(4x4, 3x3) kernels, the only f32 Winograd it has), and under Auto only
// where the slice has enough output positions (4x4 tiles) to pay for the transforms.
bool wants_winograd(std::int64_t n, const Shape& w, const Tensor& out, const Conv2dParams& p,
                    memory::data_type operands) {
  const ConvAlgorithm mode = cpu_conv_algorithm();  // read first: a bad DTRAIN_CPU_CONV_ALGO fails on any convolution
  const bool applies = operands == kF32 && w[2] == 3 && w[3] == 3 && p.stride_h == 1 && p.stride_w == 1 &&
                       p.dilation_h == 1 && p.dilation_w == 1 && p.groups == 1;
  if (!applies) return false;
  // Measured on AVX-512 (bench/results/conv_winograd_layers.txt): with 64 channels and more
  // each way, Winograd was faster or even on every ResNet layer shape whose slice has the
  // output positions of 32 whole 4x4 tiles or more (1.05-2.0x, 1.09-1.11x at exactly 32),
  // and slower below: 0.86x on 8 images of 7x7 (392 positions, in 32 tiles that 7x7 leaves
  // partly empty), 0.78x at 16 tiles. With 16-32 channels it was slower, and on a 3-channel
  // stem 1.8x slower (its transforms pad the channels to 16).
  constexpr std::int64_t kMinPositions = 32 * 16, kMinChannels = 64;
  switch (mode) {
    case ConvAlgorithm::Direct: return false;
    case ConvAlgorithm::Winograd: return true;
    case ConvAlgorithm::Auto:
      return std::min(w[0], w[1]) >= kMinChannels && n * out.size(2) * out.size(3) >= kMinPositions;
  }
  return false;
}

const ConvPrimitives& primitives(const ConvKey& k) {
  static std::mutex mutex;
  static std::map<ConvKey, ConvPrimitives> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(k);
  if (it == cache.end()) it = cache.emplace(k, make_primitives(k)).first;
  return it->second;  // std::map never moves its elements
}

// The primitives for a slice of n images of the problem x (N,C,H,W) * w -> out, whose
// operands (x and w forward, w and out's gradient backward) have type `operands`.
const ConvPrimitives& slice_primitives(std::int64_t n, const Tensor& x, const Shape& w, const Tensor& out,
                                       const Conv2dParams& p, bool bias, DType operand_type) {
  const memory::data_type operands = operand_type == DType::bf16 ? kBF16 : kF32;
  return primitives({n, x.size(1), x.size(2), x.size(3), w[0], w[2], w[3], out.size(2), out.size(3), p, bias, operands,
                     wants_winograd(n, w, out, p, operands)});
}

// Elements per image of an NCHW tensor: the offset from one image of a slice to the next.
std::int64_t image_size(const Tensor& t) { return t.size(1) * t.size(2) * t.size(3); }

// Image n0 of NCHW tensor t, in its own type.
const void* image_data(const Tensor& t, std::int64_t n0) {
  return static_cast<const char*>(t.raw_data()) + n0 * image_size(t) * static_cast<std::int64_t>(dtype_size(t.dtype()));
}

// The batch as one slice of images per thread of dtrain's pool, in order: {first, count}.
struct Slice {
  std::int64_t n0, n;
};
std::vector<Slice> batch_slices(std::int64_t batch) {
  const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>(batch, num_threads()));
  std::vector<Slice> slices;
  for (std::int64_t part = 0; part < parts; ++part) {
    const std::int64_t n0 = batch * part / parts;
    slices.push_back({n0, batch * (part + 1) / parts - n0});
  }
  return slices;
}

// Calls f(slice index, slice) for every slice, one per thread.
template <class F>
void for_slices(const std::vector<Slice>& slices, F f) {
  parallel_for(0, static_cast<std::int64_t>(slices.size()), 1, [&](std::int64_t s0, std::int64_t s1) {
    for (std::int64_t i = s0; i < s1; ++i) f(i, slices[static_cast<std::size_t>(i)]);
  });
}

// Elements per part when the weight-gradient partials are added across the pool: enough
// to outweigh waking a worker.
constexpr std::int64_t kSumGrain = 1 << 15;

// Images of activation t, in the user's layout: t's blocked bytes when it holds them (its
// plain bytes are then never made), else its plain NCHW bytes.
memory activation(const Tensor& t, const BlockedActivation* blocked, const Slice& s, const memory::desc& plain) {
  if (blocked != nullptr) return blocked->images(s.n0, s.n);
  return user_memory(plain, image_data(t, s.n0));
}

// Output channels that the 4-D weight layout `desc` keeps together in its innermost blocks
// (16 in ABcd16b16a), or 0 where it has no such blocks (plain or channels-last formats,
// whose ranges of output channels would interleave in memory) or pads a dimension.
std::int64_t output_channel_block(const memory::desc& desc) {
  const dnnl_memory_desc_t& d = desc.data;
  if (d.ndims != 4 || d.format_kind != dnnl_blocked) return 0;
  for (int i = 0; i < d.ndims; ++i) {
    if (d.padded_dims[i] != d.dims[i]) return 0;
  }
  std::int64_t block = 1;
  const auto& blocking = d.format_desc.blocking;
  for (int i = 0; i < blocking.inner_nblks; ++i) {
    if (blocking.inner_idxs[i] == 0) block *= blocking.inner_blks[i];
  }
  return block > 1 ? block : 0;
}

// Plain weights `user` reordered into `wanted` by the pool's threads, each a range of whole
// output-channel blocks: on the calling thread alone, ResNet's 512x512x3x3 weights took
// ~2 ms per convolution while the others waited.
memory reorder_by_output_channels(const memory& user, const memory::desc& wanted, std::unique_ptr<Buffer>& storage) {
  const std::int64_t block = output_channel_block(wanted);
  const memory::dims dims = wanted.dims();
  const std::int64_t blocks = block > 0 ? dims[0] / block : 0;
  const std::int64_t parts = std::min<std::int64_t>(blocks, num_threads());
  if (user.get_desc() == wanted || parts < 2) return as_layout(user, wanted, storage);
  storage = std::make_unique<Buffer>(wanted.get_size());
  const memory converted(wanted, engine(), storage->data());
  parallel_for(0, parts, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t part = p0; part < p1; ++part) {
      memory::dims size = dims, offsets(dims.size(), 0);
      offsets[0] = blocks * part / parts * block;
      size[0] = blocks * (part + 1) / parts * block - offsets[0];
      copy_back(memory(user.get_desc().submemory_desc(size, offsets), engine(), user.get_data_handle()),
                memory(wanted.submemory_desc(size, offsets), engine(), storage->data()));
    }
  });
  return converted;
}

// The weights in the layout `wanted`, reordered once for all slices (their primitives want
// one layout: only the batch differs) instead of once per slice and thread.
struct SharedWeights {
  std::unique_ptr<Buffer> storage;
  memory weights;
  SharedWeights(const Tensor& w, const memory::desc& plain, const memory::desc& wanted)
      : weights(reorder_by_output_channels(user_memory(plain, w.raw_data()), wanted, storage)) {}
  // The shared copy when a slice's primitive wants its layout, else a reorder into `buf`.
  memory for_slice(const memory::desc& plain, const memory::desc& wanted, const Tensor& w,
                   std::unique_ptr<Buffer>& buf) const {
    return weights.get_desc() == wanted ? weights : as_layout(user_memory(plain, w.raw_data()), wanted, buf);
  }
};

// A blocked home for a whole output, when the primitive writes a blocked format (`preferred`,
// its descriptor for the first slice) and the output may be handed over so.
std::shared_ptr<BlockedActivation> blocked_output(const Tensor& out, const memory::desc& preferred) {
  if (!may_block(out)) return nullptr;
  const std::optional<memory::format_tag> tag = blocked_tag(preferred);
  return tag ? std::make_shared<BlockedActivation>(out.shape(), *tag) : nullptr;
}

// Where a slice's output goes, in the user's layout: the blocked home or out's plain bytes.
memory output_images(Tensor& out, const BlockedActivation* blocked, const Slice& s, const memory::desc& plain) {
  if (blocked != nullptr) return blocked->images(s.n0, s.n);
  return user_memory(plain, out.data<float>() + s.n0 * image_size(out));
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, Tensor& out) {
  if (x.size(0) == 0) return;  // an empty batch: nothing to compute
  const std::vector<Slice> slices = batch_slices(x.size(0));
  const auto primitives_for = [&](std::int64_t n) -> const ConvPrimitives& {
    return slice_primitives(n, x, w.shape(), out, p, bias.defined(), x.dtype());
  };
  const auto x_blocked = blocked_of(x);
  const ConvPrimitives& first = primitives_for(slices[0].n);
  const auto out_blocked = blocked_output(out, first.fwd_pd.dst_desc());
  const SharedWeights shared(w, first.descs.weights, first.fwd_pd.weights_desc());
  for_slices(slices, [&](std::int64_t, const Slice& s) {
    const ConvPrimitives& c = primitives_for(s.n);
    std::unique_ptr<Buffer> src_buf, w_buf, dst_buf;
    memory src = as_layout(activation(x, x_blocked.get(), s, c.descs.src), c.fwd_pd.src_desc(), src_buf);
    memory weights = shared.for_slice(c.descs.weights, c.fwd_pd.weights_desc(), w, w_buf);
    memory user_dst = output_images(out, out_blocked.get(), s, c.descs.dst_out);
    memory dst = output_layout(user_dst, c.fwd_pd.dst_desc(), dst_buf);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
    if (bias.defined()) args.emplace(DNNL_ARG_BIAS, user_memory(c.descs.bias, bias.data<float>()));
    execute(c.fwd, std::move(args), c.fwd_pd.scratchpad_desc());
    copy_back(dst, user_dst);
  });
  if (out_blocked) hand_over(out, out_blocked);
}

void conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, Tensor& grad_x) {
  if (grad_x.size(0) == 0) return;
  const std::vector<Slice> slices = batch_slices(grad_x.size(0));
  const auto primitives_for = [&](std::int64_t n) -> const ConvPrimitives& {
    return slice_primitives(n, grad_x, w.shape(), grad_out, p, false, grad_out.dtype());
  };
  const auto dy_blocked = blocked_of(grad_out);
  const ConvPrimitives& first = primitives_for(slices[0].n);
  const auto dx_blocked = blocked_output(grad_x, first.bwd_data_pd.diff_src_desc());
  const SharedWeights shared(w, first.descs.weights, first.bwd_data_pd.weights_desc());
  for_slices(slices, [&](std::int64_t, const Slice& s) {
    const ConvPrimitives& c = primitives_for(s.n);
    const auto& pd = c.bwd_data_pd;
    std::unique_ptr<Buffer> dy_buf, w_buf, dx_buf;
    memory dy = as_layout(activation(grad_out, dy_blocked.get(), s, c.descs.dst), pd.diff_dst_desc(), dy_buf);
    memory weights = shared.for_slice(c.descs.weights, pd.weights_desc(), w, w_buf);
    memory user_dx = output_images(grad_x, dx_blocked.get(), s, c.descs.src_out);
    memory dx = output_layout(user_dx, pd.diff_src_desc(), dx_buf);
    execute(c.bwd_data, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DIFF_SRC, dx}},
            pd.scratchpad_desc());
    copy_back(dx, user_dx);
  });
  if (dx_blocked) hand_over(grad_x, dx_blocked);
}

// Each batch slice computes its own weight gradient (the first straight into grad_w); the
// partials are added in slice order, so for a given thread count the result is
// deterministic. The partials live in the block cache, not in zero-filled vectors: on a
// ResNet those were tens of megabytes per step of fresh pages, faulted in, zeroed and
// copied on the calling thread alone.
void conv2d_backward_weights(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p, Tensor& grad_w) {
  if (x.size(0) == 0) {  // a sum over no images
    std::fill_n(grad_w.data<float>(), grad_w.numel(), 0.0f);
    return;
  }
  const std::vector<Slice> slices = batch_slices(x.size(0));
  const std::int64_t wsize = grad_w.numel();
  std::vector<std::unique_ptr<Buffer>> partials;
  for (std::size_t i = 1; i < slices.size(); ++i) {
    partials.push_back(std::make_unique<Buffer>(static_cast<std::size_t>(wsize) * sizeof(float)));
  }
  const auto x_blocked = blocked_of(x), dy_blocked = blocked_of(grad_out);
  for_slices(slices, [&](std::int64_t part, const Slice& s) {
    const ConvPrimitives& c = slice_primitives(s.n, x, grad_w.shape(), grad_out, p, false, x.dtype());
    const auto& pd = c.bwd_weights_pd;
    std::unique_ptr<Buffer> src_buf, dy_buf, dw_buf;
    memory src = as_layout(activation(x, x_blocked.get(), s, c.descs.src), pd.src_desc(), src_buf);
    memory dy = as_layout(activation(grad_out, dy_blocked.get(), s, c.descs.dst), pd.diff_dst_desc(), dy_buf);
    float* target =
        part == 0 ? grad_w.data<float>() : static_cast<float*>(partials[static_cast<std::size_t>(part - 1)]->data());
    memory user_dw = user_memory(c.descs.weights_out, target);
    memory dw = output_layout(user_dw, pd.diff_weights_desc(), dw_buf);
    execute(c.bwd_weights, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, dw}},
            pd.scratchpad_desc());
    copy_back(dw, user_dw);
  });
  if (partials.empty()) return;
  float* total = grad_w.data<float>();
  parallel_for(0, wsize, kSumGrain, [&](std::int64_t i0, std::int64_t i1) {
    for (const auto& buffer : partials) {
      const float* partial = static_cast<const float*>(buffer->data());
      for (std::int64_t i = i0; i < i1; ++i) total[i] += partial[i];
    }
  });
}

}  // namespace dtrain::detail::onednn
