#include "dtrain/dist/tensor_parallel/tensor_parallel_ops.h"

#include "dist/tensor_parallel/owned_ids.h"

#include "dtrain/core/error.h"
#include "dtrain/core/trace.h"
#include "dtrain/dist/tensor_parallel/comm_debug.h"
#include "dtrain/tensor/ops.h"

#include <fmt/format.h>

namespace dtrain::dist {

namespace {

// Counts and traces one collective of `module`.
class Collective {
 public:
  Collective(const std::string& module, const char* kind, bool backward, const Tensor& t)
      : span_(fmt::format("tp {} {}", kind, module), trace::Phase::Communication) {
    detail::record_collective(module, kind, backward, t.numel() * static_cast<std::int64_t>(dtype_size(t.dtype())));
  }

 private:
  trace::Span span_;
};

Tensor all_reduced(const Tensor& t, Communicator& group, const std::string& module, bool backward) {
  Tensor out = t.contiguous().clone();
  Collective c(module, "all_reduce", backward, out);
  group.all_reduce(out, ReduceOp::Sum);
  return out;
}

void check_sequence(const Tensor& x, const char* what) {
  DTRAIN_CHECK(x.dim() >= 2, "{}: expected activations (B, T, ...), got {}", what, shape_str(x.shape()));
}

// (B, Ts, rest) shards of the group -> (B, n * Ts, rest), rank r's shard at r * Ts.
Tensor all_gathered_sequence(const Tensor& x, Communicator& group, const std::string& module, bool backward) {
  const int n = group.size();
  const Tensor in = x.contiguous();
  Shape gathered{n};
  gathered.insert(gathered.end(), in.shape().begin(), in.shape().end());
  Tensor out = Tensor::empty(gathered, in.options());
  {
    Collective c(module, "all_gather", backward, in);
    group.all_gather(in, out);
  }
  const std::int64_t b = in.size(0), ts = in.size(1), rest = in.numel() / std::max<std::int64_t>(b * ts, 1);
  Shape shape = in.shape();
  shape[1] = ts * n;
  return out.reshape({n, b, ts, rest}).permute({1, 0, 2, 3}).contiguous().reshape(shape);
}

// (B, T, rest) partial on every rank -> this rank's (B, T/n, rest) of the sum.
Tensor reduce_scattered_sequence(const Tensor& x, Communicator& group, const std::string& module, bool backward) {
  const int n = group.size();
  const std::int64_t b = x.size(0), t = x.size(1), rest = x.numel() / std::max<std::int64_t>(b * t, 1);
  DTRAIN_CHECK(t % n == 0, "tensor parallelism ({}): a sequence of {} tokens does not split over {} ranks", module, t,
               n);
  const Tensor in = x.contiguous().reshape({b, n, t / n, rest}).permute({1, 0, 2, 3}).contiguous();
  Shape shape = x.shape();
  shape[1] = t / n;
  Tensor out = Tensor::empty(shape, x.options());
  Collective c(module, "reduce_scatter", backward, in);
  group.reduce_scatter(in, out, ReduceOp::Sum);
  return out;
}

Tensor local_shard(const Tensor& x, int n, int rank, const std::string& module) {
  const std::int64_t t = x.size(1);
  DTRAIN_CHECK(t % n == 0, "tensor parallelism ({}): a sequence of {} tokens does not split over {} ranks", module, t,
               n);
  return x.narrow(1, rank * (t / n), t / n).contiguous();
}

}  // namespace

Variable copy_to_tensor_parallel(const Variable& x, const CommunicatorPtr& group, const std::string& module) {
  return Variable(x.data(), {x}, [group, module](std::vector<Variable>& in, const Tensor& g) {
    if (in[0].requires_grad()) in[0].add_grad(all_reduced(g, *group, module, true));
  });
}

Variable reduce_from_tensor_parallel(const Variable& x, const CommunicatorPtr& group, const std::string& module) {
  return Variable(all_reduced(x.data(), *group, module, false), {x}, [](std::vector<Variable>& in, const Tensor& g) {
    if (in[0].requires_grad()) in[0].add_grad(g);
  });
}

Variable gather_sequence(const Variable& x, const CommunicatorPtr& group, const std::string& module) {
  check_sequence(x.data(), "gather_sequence");
  return Variable(all_gathered_sequence(x.data(), *group, module, false), {x},
                  [group, module](std::vector<Variable>& in, const Tensor& g) {
                    if (in[0].requires_grad()) in[0].add_grad(reduce_scattered_sequence(g, *group, module, true));
                  });
}

Variable reduce_scatter_sequence(const Variable& x, const CommunicatorPtr& group, const std::string& module) {
  check_sequence(x.data(), "reduce_scatter_sequence");
  return Variable(reduce_scattered_sequence(x.data(), *group, module, false), {x},
                  [group, module](std::vector<Variable>& in, const Tensor& g) {
                    if (in[0].requires_grad()) in[0].add_grad(all_gathered_sequence(g, *group, module, true));
                  });
}

Variable split_sequence(const Variable& x, const CommunicatorPtr& group, const std::string& module) {
  check_sequence(x.data(), "split_sequence");
  return Variable(local_shard(x.data(), group->size(), group->rank(), module), {x},
                  [group, module](std::vector<Variable>& in, const Tensor& g) {
                    if (in[0].requires_grad()) in[0].add_grad(all_gathered_sequence(g, *group, module, true));
                  });
}

Variable vocab_parallel_cross_entropy(const Variable& logits, const Tensor& targets, std::int64_t vocab_begin,
                                      const CommunicatorPtr& group) {
  DTRAIN_CHECK(
      logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) && logits.size(1) == targets.size(1),
      "vocab_parallel_cross_entropy: logits {} do not match targets {} (expected (B, T, V_r) and (B, T))",
      shape_str(logits.shape()), shape_str(targets.shape()));
  const std::string module = "loss";
  const std::int64_t width = logits.size(2), rows = targets.numel();
  const DType dtype = logits.dtype();
  const Tensor z = logits.data().reshape({rows, width}).to(DType::f32);
  Tensor row_max = max(z, {1}, true);  // (N, 1)
  {
    Collective c(module, "all_reduce", false, row_max);
    group->all_reduce(row_max, ReduceOp::Max);
  }
  const Tensor shifted = sub(z, row_max);
  const Tensor e = exp(shifted);
  Tensor sums = sum(e, {1}, true);  // (N, 1)
  // Each row's target column on this rank, or none: local index and a 0/1 mask.
  const auto [index, owned] = detail::owned_ids(targets.reshape({rows, 1}), vocab_begin, width);  // (N, 1) each
  Tensor target_logit = mul(gather(shifted, 1, index), owned);                                    // (N, 1)
  {
    Collective c(module, "all_reduce", false, target_logit);
    group->all_reduce(target_logit, ReduceOp::Sum);
  }
  {
    Collective c(module, "all_reduce", false, sums);
    group->all_reduce(sums, ReduceOp::Sum);
  }
  const Tensor loss = mean(sub(log(sums), target_logit));  // scalar
  return Variable(loss.to(dtype), {logits},
                  [e, sums, index, owned, rows, width, dtype](std::vector<Variable>& in, const Tensor& g) {
                    if (!in[0].requires_grad()) return;
                    Tensor grad = div(e, sums);  // softmax on this rank's columns
                    grad = sub(grad, scatter_add({rows, width}, 1, index, owned));
                    grad = mul(grad, div(g.to(DType::f32), static_cast<double>(rows)));
                    in[0].add_grad(grad.reshape(in[0].shape()).to(dtype));
                  });
}

SplitRange split_range(std::int64_t n, int ranks, int rank, std::int64_t granule) {
  DTRAIN_CHECK(ranks > 0 && rank >= 0 && rank < ranks && granule > 0 && n % granule == 0,
               "split_range: {} in granules of {} over rank {} of {}", n, granule, rank, ranks);
  const std::int64_t units = n / granule, base = units / ranks, extra = units % ranks;
  const std::int64_t begin = rank * base + std::min<std::int64_t>(rank, extra);
  return {begin * granule, (base + (rank < extra ? 1 : 0)) * granule};
}

}  // namespace dtrain::dist
