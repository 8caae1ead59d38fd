#include "dtrain/dist/data_parallel/sync_batch_norm.h"

namespace dtrain::dist {
namespace {

// Every dim but the channel dim (1): the dims batch statistics reduce over.
std::vector<std::int64_t> reduced_dims(std::int64_t ndim) {
  std::vector<std::int64_t> dims{0};
  for (std::int64_t d = 2; d < ndim; ++d) dims.push_back(d);
  return dims;
}

// (C) -> (1, C, 1, ...), to broadcast along dim 1 of x.
Shape channel_shape(const Tensor& x) {
  Shape s(static_cast<std::size_t>(x.dim()), 1);
  s[1] = x.size(1);
  return s;
}

// xhat = (x - mean) / sqrt(var + eps) with mean and biased variance over the union of
// every rank's batch, as one differentiable step; batch_var is set to the unbiased
// variance over that union, for the running statistics. Forward all-reduces the per-channel
// sum, sum of squares and element count (so ranks may hold different batch sizes);
// backward all-reduces the per-channel sums of g and g * xhat, because
//   dx = invstd * (g - mean(g) - xhat * mean(g * xhat))
// takes its means over the global batch. Both are collectives: every rank of `comm` runs
// forward and backward through this step together.
Variable sync_normalize(const Variable& x, const CommunicatorPtr& comm, double eps, Tensor& batch_mean,
                        Tensor& batch_var) {
  const Tensor& xd = x.data();
  const std::int64_t channels = x.size(1);
  const std::vector<std::int64_t> dims = reduced_dims(x.dim());

  // [sum (C) | sum of squares (C) | count], in double: the variance comes out as
  // E[x^2] - E[x]^2, which cancels digits that f32 sums could not spare.
  Tensor stats = Tensor::empty({2 * channels + 1}, {DType::f64, xd.device()});
  stats.narrow(0, 0, channels).copy_(sum(xd, dims));
  stats.narrow(0, channels, channels).copy_(sum(square(xd), dims));
  stats.narrow(0, 2 * channels, 1).fill_(static_cast<double>(x.numel() / channels));
  comm->all_reduce(stats, ReduceOp::Sum);

  const double count = stats.narrow(0, 2 * channels, 1).item();
  DTRAIN_CHECK(count > 1, "SyncBatchNorm: training needs more than one value per channel over all {} ranks, got {}",
               comm->size(), count);
  Tensor mean64 = div(stats.narrow(0, 0, channels), count);
  // relu clamps the tiny negative values rounding can leave for a constant channel.
  Tensor var64 = relu(sub(div(stats.narrow(0, channels, channels), count), square(mean64)));
  batch_mean = mean64.to(xd.dtype());
  batch_var = mul(var64, count / (count - 1)).to(xd.dtype());  // unbiased, over the global count

  const Shape cs = channel_shape(xd);
  Tensor invstd = rsqrt(add(var64, eps)).to(xd.dtype()).reshape(cs);
  Tensor xhat = mul(sub(xd, batch_mean.reshape(cs)), invstd);
  return Variable(xhat, {x}, [dims, xhat, invstd, count, group = comm](std::vector<Variable>& in, const Tensor& g) {
    const std::int64_t c = xhat.size(1);
    Tensor sums = Tensor::empty({2, c}, g.options());
    sums.select(0, 0).copy_(sum(g, dims));
    sums.select(0, 1).copy_(sum(mul(g, xhat), dims));
    group->all_reduce(sums, ReduceOp::Sum);
    const Shape cs = channel_shape(xhat);
    Tensor g_mean = div(sums.select(0, 0), count).reshape(cs);
    Tensor gx_mean = div(sums.select(0, 1), count).reshape(cs);
    in[0].add_grad(mul(sub(sub(g, g_mean), mul(xhat, gx_mean)), invstd));
  });
}

}  // namespace

SyncBatchNorm::SyncBatchNorm(const nn::BatchNorm& original, CommunicatorPtr comm)
    : nn::BatchNorm(original.channels(), original.expected_dims(), original.options()), comm_(std::move(comm)) {
  DTRAIN_CHECK(comm_ != nullptr, "SyncBatchNorm: the communicator must be given");
  to(original.running_mean.device());
  load_state_dict(original.state_dict());
  train(original.is_training());
  if (weight.defined()) weight.set_requires_grad(original.weight.requires_grad());  // frozen stays frozen
  if (bias.defined()) bias.set_requires_grad(original.bias.requires_grad());
}

std::string SyncBatchNorm::describe() const { return "Sync" + nn::BatchNorm::describe(); }

Variable SyncBatchNorm::normalize_batch(const Variable& x, Tensor& batch_mean, Tensor& unbiased_var, bool relu) {
  Variable xhat = sync_normalize(x, comm_, options().eps, batch_mean, unbiased_var);
  const Shape cs = channel_shape(x.data());
  Variable y = xhat;
  if (weight.defined()) y = mul(y, reshape(weight, cs));
  if (bias.defined()) y = add(y, reshape(bias, cs));
  return relu ? dtrain::relu(y) : y;  // composed: the statistics are all-reduced between the passes
}

int convert_sync_batch_norm(nn::Module& module, const CommunicatorPtr& comm) {
  int converted = 0;
  // Copies the list: replace_child rewrites the entries being walked.
  const auto children = module.children();
  for (const auto& [name, child] : children) {
    auto* bn = dynamic_cast<nn::BatchNorm*>(child.get());
    if (bn != nullptr && dynamic_cast<SyncBatchNorm*>(bn) == nullptr) {
      module.replace_child(name, std::make_shared<SyncBatchNorm>(*bn, comm));
      ++converted;
    } else {
      converted += convert_sync_batch_norm(*child, comm);
    }
  }
  return converted;
}

}  // namespace dtrain::dist
