#include "dist/zero/optimizer_shards.h"

#include "dtrain/comm/partition.h"
#include "dtrain/core/trace.h"

#include <fmt/format.h>

namespace dtrain::dist {

GradientExchangeFactory reduce_scatter_factory(Device device, ReduceScatterExchange** made, CommunicatorPtr across,
                                               DType wire, std::string codec) {
  return [device, made, across = std::move(across), wire, codec = std::move(codec)](const CommunicatorPtr& replicas) {
    auto exchange = std::make_unique<ReduceScatterExchange>(
        replicas, device, across, wire, codec.empty() ? nullptr : make_gradient_exchange(codec, replicas));
    *made = exchange.get();
    return exchange;
  };
}

std::vector<Tensor> flatten_buckets(nn::Module& module, const ReduceScatterExchange& exchange, Device device) {
  std::map<std::string, Variable> params;
  for (auto& [name, p] : module.named_parameters()) params.emplace(name, p);
  NoGradGuard no_grad;
  std::vector<Tensor> flat;
  for (std::size_t b = 0; b < exchange.buckets().size(); ++b) {
    const BucketLayout& layout = exchange.buckets()[b];
    Tensor buffer = Tensor::zeros({exchange.shard(b).padded}, {layout.dtype, device});
    for (const BucketLayout::Member& m : layout.members) {
      Variable& p = params.at(m.name);
      Tensor region = buffer.narrow(0, m.offset, p.numel());
      region.copy_(p.data().reshape({p.numel()}));
      p.set_data(region.view(m.shape));
    }
    flat.push_back(std::move(buffer));
  }
  return flat;
}

std::vector<Tensor> own_chunks(const std::vector<Tensor>& flat, int rank, int ranks) {
  std::vector<Tensor> chunks;
  for (const Tensor& f : flat) {
    const std::int64_t chunk = f.numel() / ranks;
    chunks.push_back(f.narrow(0, chunk * rank, chunk));
  }
  return chunks;
}

void all_gather_chunks(Communicator& comm, std::vector<Tensor>& flat) {
  trace::Span span("parameter all-gather", trace::Phase::Communication);
  const int rank = comm.rank(), ranks = comm.size();
  std::vector<WorkPtr> works;
  for (Tensor& f : flat) {
    const std::int64_t chunk = f.numel() / ranks;
    // In place: this rank's chunk is its own slot of the gathered bucket.
    Tensor out = f.view({ranks, chunk});
    works.push_back(comm.all_gather_async(f.narrow(0, chunk * rank, chunk), out));
  }
  for (const WorkPtr& w : works) w->wait();
}

void check_every_rank_owns_elements(const ReduceScatterExchange& exchange, int ranks) {
  // Every rank computes the same counts, so all of them refuse together.
  for (int q = 0; q < ranks; ++q) {
    std::int64_t owned = 0;
    for (const BucketLayout& b : exchange.buckets()) {
      owned += static_cast<std::int64_t>(shard_bucket(b, q, ranks).segments.size());
    }
    DTRAIN_CHECK(owned > 0,
                 "sharded optimizer: rank {} of {} would own no parameter elements (the model's buckets are too "
                 "small to cut {} ways; use fewer ranks or an unsharded optimizer)",
                 q, ranks, ranks);
  }
}

OptimizerShards::OptimizerShards(CommunicatorPtr comm, const ReduceScatterExchange& exchange,
                                 const std::vector<Tensor>& chunks)
    : comm_(std::move(comm)) {
  const std::vector<BucketLayout>& buckets = exchange.buckets();
  std::vector<std::size_t> first_tensor;  // per bucket: the index of its first member
  for (const BucketLayout& b : buckets) {
    first_tensor.push_back(tensors_);
    tensors_ += b.members.size();
  }
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const BucketLayout& layout = buckets[b];
    const Tensor& gradients = exchange.gradient_chunk(b);
    for (const ShardSegment& s : exchange.shard(b).segments) {
      const BucketLayout::Member& m = layout.members[s.member];
      const std::vector<std::int64_t> shape = slice_shape(s.length, m.shape.size());
      Variable v(chunks.at(b).narrow(0, s.at, s.length).view(shape), true);
      v.set_grad(gradients.narrow(0, s.at, s.length).view(shape));
      slices_.push_back({m.name, s.offset, s.length, first_tensor[b] + s.member, std::move(v)});
    }
  }
}

std::vector<Variable> OptimizerShards::slices_of(const std::set<std::string>& parameters) const {
  std::vector<Variable> out;
  for (const Slice& s : slices_) {
    if (parameters.contains(s.parameter)) out.push_back(s.variable);
  }
  return out;
}

std::int64_t OptimizerShards::elements() const {
  std::int64_t n = 0;
  for (const Slice& s : slices_) n += s.length;
  return n;
}

std::string OptimizerShards::range_of(const Slice& s) const {
  return fmt::format("{}[{}:{}]", s.parameter, s.offset, s.offset + s.length);
}

optim::Optimizer& OptimizerShards::optimizer(const optim::Optimizer& given) {
  if (!optimizer_) {
    std::vector<Variable> variables;
    optim::Optimizer::SliceNorms norms;
    for (const Slice& s : slices_) {
      variables.push_back(s.variable);
      norms.tensor_of.push_back(s.tensor);
    }
    norms.tensors = tensors_;
    norms.sum_over_ranks = [comm = comm_](Tensor& t) { comm->all_reduce(t, ReduceOp::Sum); };
    optimizer_ = given.rebind_slices(std::move(variables), std::move(norms));
  }
  optimizer_->set_lr(given.lr());
  return *optimizer_;
}

void OptimizerShards::share_through(CheckpointPlan& plan) {
  plan.optimizer_share = [this](const optim::Optimizer& given) { return save_state(given); };
  plan.load_optimizer_share = [this](optim::Optimizer& given, const optim::NamedTensors& whole) {
    load_state(given, whole);
  };
}

optim::NamedTensors OptimizerShards::save_state(const optim::Optimizer& given) const {
  optim::NamedTensors out;
  if (!optimizer_) {  // no step yet: nothing but the counters
    out.emplace_back("lr", Tensor::scalar(given.lr(), {DType::f64}));
    out.emplace_back("steps", Tensor::scalar(0, {DType::i64}));
    return out;
  }
  for (const auto& [key, t] : optimizer_->state_view()) {
    if (key == "lr" || key == "steps") {
      out.emplace_back(key, t);
    } else if (key == "updates") {
      const std::vector<std::int64_t> counts = t.to_vector<std::int64_t>();
      for (std::size_t i = 0; i < slices_.size(); ++i) {
        out.emplace_back(slices_[i].parameter + "/updates",
                         Tensor::scalar(static_cast<double>(counts[i]), {DType::i64}));
      }
    } else {
      // "<buffer>.<slice index>", as Optimizer::state_view names a buffer of one parameter.
      const auto dot = key.rfind('.');
      const Slice& s = slices_.at(std::stoul(key.substr(dot + 1)));
      out.emplace_back(fmt::format("{}/{}", range_of(s), key.substr(0, dot)), t.reshape({s.length}));
    }
  }
  return out;
}

void OptimizerShards::load_state(optim::Optimizer& given, const optim::NamedTensors& whole) {
  std::map<std::string, std::vector<std::size_t>> by_parameter;
  for (std::size_t i = 0; i < slices_.size(); ++i) by_parameter[slices_[i].parameter].push_back(i);
  optim::NamedTensors state;
  std::vector<std::int64_t> updates(slices_.size(), 0);
  bool lr = false, steps = false;
  for (const auto& [key, t] : whole) {
    if (key == "lr" || key == "steps") {
      bool& seen = key == "lr" ? lr : steps;
      if (!seen) state.emplace_back(key, t);
      seen = true;
      continue;
    }
    const auto slash = key.rfind('/');
    if (slash == std::string::npos) continue;
    const auto it = by_parameter.find(key.substr(0, slash));
    if (it == by_parameter.end()) continue;  // another rank's parameter, or the scaler's
    const std::string what = key.substr(slash + 1);
    for (std::size_t i : it->second) {
      const Slice& s = slices_[i];
      if (what == "updates") {
        updates[i] = static_cast<std::int64_t>(t.item());
      } else {
        state.emplace_back(fmt::format("{}.{}", what, i),
                           t.reshape({t.numel()}).narrow(0, s.offset, s.length).reshape(s.variable.shape()));
      }
    }
  }
  state.emplace_back("updates", Tensor::from_vector(updates, {static_cast<std::int64_t>(updates.size())}));
  optimizer(given).load_state(state);
}

nn::StateDict OptimizerShards::parameter_ranges() const {
  nn::StateDict out;
  for (const Slice& s : slices_) out.emplace_back(range_of(s), s.variable.data().reshape({s.length}));
  return out;
}

void OptimizerShards::load_parameters(const std::map<std::string, Tensor>& whole) {
  NoGradGuard no_grad;
  for (const Slice& s : slices_) {
    const Tensor& t = whole.at(s.parameter);
    Tensor target = s.variable.data();
    target.copy_(t.reshape({t.numel()}).narrow(0, s.offset, s.length).reshape(target.shape()));
  }
}

}  // namespace dtrain::dist
