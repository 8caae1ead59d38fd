// CUDA 2-D convolution through cuDNN's convolution API: forward, backward-data and
// backward-filter on packed NCHW / OIHW tensors, f32 and f64, and f16/bf16 operands with
// f32 sums (cuDNN writes a 16-bit result, widened into the f32 one), with stride, padding,
// dilation and groups. Per problem (shapes, parameters, dtype) the descriptors are made
// once and each direction's algorithm is chosen once, on first use, from cuDNN's
// heuristics (cudnnGet*_v7: no trial runs, no device synchronisation), preferring
// deterministic algorithms so that a run repeats bit for bit as on the CPU. f32 uses only
// FMA kernels unless TF32 is allowed (tf32.h): cuDNN's default math would let Ampere and
// later GPUs round f32 convolutions to TF32. Workspace comes from the device's block cache.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/library_check.h"
#include "tensor/cuda/tf32.h"

#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

namespace dtrain::detail {
namespace {

// One convolution problem; the output's spatial size follows from the rest.
struct ConvKey {
  DType dtype;
  std::int64_t n, c, h, w;  // input
  std::int64_t o, kh, kw;   // weight (o, c / groups, kh, kw)
  Conv2dParams p;
  auto tie() const {
    return std::tie(dtype, n, c, h, w, o, kh, kw, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h,
                    p.dilation_w, p.groups);
  }
  bool operator<(const ConvKey& k) const { return tie() < k.tie(); }
};

// A direction's algorithm, the math type it runs with and the workspace it needs.
struct ConvChoice {
  int algo;
  cudnnMathType_t math;
  std::size_t workspace;
};

// The descriptors of one problem and the algorithms chosen so far. Plans live as long as
// the library; the destructor only runs when making one fails half-way.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool fma_only = false;  // f32 without TF32: never a tensor-op kernel
  std::optional<ConvChoice> forward, backward_data, backward_filter;

  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

}  // namespace

// A device's cuDNN handle and its plans. cuDNN forbids using one handle from two threads
// at once, so every use holds `mutex`.
struct ConvLibrary {
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;
  std::map<ConvKey, std::unique_ptr<ConvPlan>> plans;
};

namespace {

// cuDNN's legacy descriptors take int sizes and strides.
int as_int(std::int64_t v) {
  DTRAIN_CHECK(v <= INT_MAX, "conv2d: size {} exceeds cuDNN's 32-bit limit", v);
  return static_cast<int>(v);
}

void check_fits(const Tensor& t, const char* what) {
  DTRAIN_CHECK(t.numel() <= INT_MAX, "conv2d: {} {} has more elements than cuDNN's 32-bit indexing allows", what,
               shape_str(t.shape()));
}

cudnnDataType_t cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: DTRAIN_FAIL("conv2d: no cuDNN data type for {}", dtype_name(dtype));
  }
}

// Where cuDNN writes a result of 16-bit operands: it wants the output in the operands'
// type, so a 16-bit tensor that is then widened into the f32 result.
// Otherwise the result itself.
Tensor target_for(const Tensor& result, DType data) {
  return result.dtype() == data ? result : Tensor::empty(result.shape(), {data, result.device()});
}

std::unique_ptr<ConvPlan> make_plan(const ConvKey& k, std::int64_t oh, std::int64_t ow) {
  auto plan = std::make_unique<ConvPlan>();
  const cudnnDataType_t type = cudnn_type(k.dtype);
  plan->fma_only = k.dtype == DType::f32 && !gpu::allow_tf32();
  DTRAIN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->x));
  DTRAIN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->y));
  DTRAIN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&plan->w));
  DTRAIN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&plan->conv));
  DTRAIN_CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(plan->x, CUDNN_TENSOR_NCHW, type, as_int(k.n), as_int(k.c), as_int(k.h), as_int(k.w)));
  DTRAIN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->w, type, CUDNN_TENSOR_NCHW, as_int(k.o),
                                                as_int(k.c / k.p.groups), as_int(k.kh), as_int(k.kw)));
  DTRAIN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(plan->conv, as_int(k.p.pad_h), as_int(k.p.pad_w),
                                                     as_int(k.p.stride_h), as_int(k.p.stride_w),
                                                     as_int(k.p.dilation_h), as_int(k.p.dilation_w),
                                                     CUDNN_CROSS_CORRELATION,
                                                     is_half(k.dtype) ? CUDNN_DATA_FLOAT : type));  // f32 sums
  DTRAIN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan->conv, as_int(k.p.groups)));
  // 16-bit operands are there for the tensor cores: ask for them explicitly.
  DTRAIN_CUDNN_CHECK(cudnnSetConvolutionMathType(
      plan->conv, plan->fma_only ? CUDNN_FMA_MATH : is_half(k.dtype) ? CUDNN_TENSOR_OP_MATH : CUDNN_DEFAULT_MATH));
  // Both use PyTorch's output-size formula; a disagreement would be a bug here.
  int dims[4] = {};
  DTRAIN_CUDNN_CHECK(
      cudnnGetConvolution2dForwardOutputDim(plan->conv, plan->x, plan->w, &dims[0], &dims[1], &dims[2], &dims[3]));
  DTRAIN_CHECK(dims[0] == k.n && dims[1] == k.o && dims[2] == oh && dims[3] == ow,
               "conv2d: cuDNN computes output [{}, {}, {}, {}], dtrain [{}, {}, {}, {}]", dims[0], dims[1], dims[2],
               dims[3], k.n, k.o, oh, ow);
  DTRAIN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->y, CUDNN_TENSOR_NCHW, type, dims[0], dims[1], dims[2], dims[3]));
  return plan;
}

// The first of cuDNN's heuristic results (best first) that runs, is allowed under the
// plan's math restriction and, if any such is, deterministic; its math type is set on the
// plan's descriptor for the workspace query that follows.
template <class Perf>
ConvChoice pick(ConvPlan& plan, const Perf* perf, int count, const char* direction) {
  auto allowed = [&](const Perf& r) {
    const bool tensor_op = r.mathType == CUDNN_TENSOR_OP_MATH || r.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    return r.status == CUDNN_STATUS_SUCCESS && !(plan.fma_only && tensor_op);
  };
  for (bool deterministic_only : {true, false}) {
    for (int i = 0; i < count; ++i) {
      if (!allowed(perf[i]) || (deterministic_only && perf[i].determinism != CUDNN_DETERMINISTIC)) continue;
      const ConvChoice c{static_cast<int>(perf[i].algo), plan.fma_only ? CUDNN_FMA_MATH : perf[i].mathType, 0};
      DTRAIN_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, c.math));
      return c;
    }
  }
  DTRAIN_FAIL("conv2d: cuDNN offers no {} algorithm for this problem ({} candidates, none usable)", direction, count);
}

ConvChoice choose_forward(cudnnHandle_t h, ConvPlan& plan) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  DTRAIN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, plan.x, plan.w, plan.conv, plan.y,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
  ConvChoice c = pick(plan, perf, count, "forward");
  DTRAIN_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
      h, plan.x, plan.w, plan.conv, plan.y, static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), &c.workspace));
  return c;
}

ConvChoice choose_backward_data(cudnnHandle_t h, ConvPlan& plan) {
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int count = 0;
  DTRAIN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, plan.w, plan.y, plan.conv, plan.x,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
  ConvChoice c = pick(plan, perf, count, "backward-data");
  DTRAIN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
      h, plan.w, plan.y, plan.conv, plan.x, static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), &c.workspace));
  return c;
}

ConvChoice choose_backward_filter(cudnnHandle_t h, ConvPlan& plan) {
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int count = 0;
  DTRAIN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, plan.x, plan.y, plan.conv, plan.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
  ConvChoice c = pick(plan, perf, count, "backward-filter");
  DTRAIN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
      h, plan.x, plan.y, plan.conv, plan.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), &c.workspace));
  return c;
}

// The plan of the problem x (N,C,H,W) * w (O,C/g,KH,KW) -> y (N,O,OH,OW), made on first
// use. Caller holds lib.mutex.
ConvPlan& plan_for(ConvLibrary& lib, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  check_fits(x, "input");
  check_fits(w, "weight");
  check_fits(y, "output");
  const ConvKey key{x.dtype(), x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), p};
  auto it = lib.plans.find(key);
  if (it == lib.plans.end()) it = lib.plans.emplace(key, make_plan(key, y.size(2), y.size(3))).first;
  return *it->second;
}

// Runs `call(alpha, beta)` with the scaling factors cuDNN expects for the dtype (double
// for f64 data, float otherwise): y = 1 * op(...) + 0 * y, which overwrites.
template <class F>
void with_scaling(DType dtype, F call) {
  if (dtype == DType::f64) {
    const double one = 1, zero = 0;
    call(&one, &zero);
  } else {
    const float one = 1, zero = 0;
    call(&one, &zero);
  }
}

}  // namespace

ConvLibrary& CudaBackend::conv_library() {
  std::call_once(conv_once_, [&] {
    auto lib = std::make_unique<ConvLibrary>();
    DTRAIN_CUDNN_CHECK(cudnnCreate(&lib->handle));
    const cudnnStatus_t status = cudnnSetStream(lib->handle, stream_);
    if (status != CUDNN_STATUS_SUCCESS) {
      cudnnDestroy(lib->handle);
      gpu::throw_cudnn_error(status, "cudnnSetStream(handle, stream_)");
    }
    conv_ = lib.release();
  });
  return *conv_;
}

// The backward ops hand over uninitialized gradients (ops_conv.cpp); cuDNN overwrites them
// (beta = 0), and a sum over nothing is filled with zeros.

void CudaBackend::conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const Conv2dParams& p,
                         Tensor& out) {
  if (out.numel() == 0) return;
  cuda::DeviceGuard guard(device_);
  if (x_in.numel() == 0 || w_in.numel() == 0) {
    fill(out, 0);  // no input channels or rows: every sum is empty
  } else {
    const Tensor x = x_in.contiguous(), w = w_in.contiguous();
    Tensor y = target_for(out, x.dtype());
    ConvLibrary& lib = conv_library();
    std::lock_guard lock(lib.mutex);
    ConvPlan& plan = plan_for(lib, x, w, y, p);
    if (!plan.forward) plan.forward = choose_forward(lib.handle, plan);
    const ConvChoice& c = *plan.forward;
    DTRAIN_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, c.math));
    const Tensor workspace = Tensor::empty({static_cast<std::int64_t>(c.workspace)}, {DType::u8, out.device()});
    with_scaling(out.dtype(), [&](const void* one, const void* zero) {
      DTRAIN_CUDNN_CHECK(cudnnConvolutionForward(lib.handle, one, plan.x, x.raw_data(), plan.w, w.raw_data(), plan.conv,
                                                 static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), workspace.raw_data(),
                                                 c.workspace, zero, plan.y, y.raw_data()));
    });
    if (!y.same_storage(out)) copy(y, out);
  }
  if (bias.defined()) binary(BinaryOp::Add, out, bias.reshape({1, bias.size(0), 1, 1}).expand(out.shape()), out);
}

void CudaBackend::conv2d_backward_input(const Tensor& grad_out_in, const Tensor& w_in, const Conv2dParams& p,
                                        Tensor& grad_x) {
  if (grad_x.numel() == 0 || grad_out_in.numel() == 0 || w_in.numel() == 0) {
    fill(grad_x, 0.0);  // a sum over nothing
    return;
  }
  cuda::DeviceGuard guard(device_);
  const Tensor grad_out = grad_out_in.contiguous(), w = w_in.contiguous();
  Tensor gx = target_for(grad_x, w.dtype());
  ConvLibrary& lib = conv_library();
  std::lock_guard lock(lib.mutex);
  ConvPlan& plan = plan_for(lib, gx, w, grad_out, p);
  if (!plan.backward_data) plan.backward_data = choose_backward_data(lib.handle, plan);
  const ConvChoice& c = *plan.backward_data;
  DTRAIN_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, c.math));
  const Tensor workspace = Tensor::empty({static_cast<std::int64_t>(c.workspace)}, {DType::u8, grad_x.device()});
  with_scaling(grad_x.dtype(), [&](const void* one, const void* zero) {
    DTRAIN_CUDNN_CHECK(cudnnConvolutionBackwardData(lib.handle, one, plan.w, w.raw_data(), plan.y, grad_out.raw_data(),
                                                    plan.conv, static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo),
                                                    workspace.raw_data(), c.workspace, zero, plan.x,
                                                    gx.raw_data()));
  });
  if (!gx.same_storage(grad_x)) copy(gx, grad_x);
}

void CudaBackend::conv2d_backward_weight(const Tensor& grad_out_in, const Tensor& x_in, const Conv2dParams& p,
                                         Tensor& grad_w) {
  if (grad_w.numel() == 0 || grad_out_in.numel() == 0 || x_in.numel() == 0) {
    fill(grad_w, 0.0);  // a sum over nothing
    return;
  }
  cuda::DeviceGuard guard(device_);
  const Tensor grad_out = grad_out_in.contiguous(), x = x_in.contiguous();
  Tensor gw = target_for(grad_w, x.dtype());
  ConvLibrary& lib = conv_library();
  std::lock_guard lock(lib.mutex);
  ConvPlan& plan = plan_for(lib, x, gw, grad_out, p);
  if (!plan.backward_filter) plan.backward_filter = choose_backward_filter(lib.handle, plan);
  const ConvChoice& c = *plan.backward_filter;
  DTRAIN_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, c.math));
  const Tensor workspace = Tensor::empty({static_cast<std::int64_t>(c.workspace)}, {DType::u8, grad_w.device()});
  with_scaling(grad_w.dtype(), [&](const void* one, const void* zero) {
    DTRAIN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(lib.handle, one, plan.x, x.raw_data(), plan.y,
                                                      grad_out.raw_data(), plan.conv,
                                                      static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo),
                                                      workspace.raw_data(), c.workspace, zero, plan.w,
                                                      gw.raw_data()));
  });
  if (!gw.same_storage(grad_w)) copy(gw, grad_w);
}

}  // namespace dtrain::detail
