#include "dtrain/dist/sharded/sharded_strategy.h"

#include "dist/comm/mpi_entry.h"
#include "dist/sharded/layer_gatherer.h"
#include "dist/sharded/reduce_scatter_exchange.h"
#include "dtrain/core/trace.h"
#include "dtrain/dist/comm/nccl.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace dtrain::dist {

// One segment of this rank's chunk of a bucket, as the optimizer sees it.
struct ShardedDataParallelStrategy::Slice {
  std::string parameter;    // its name in the module
  std::int64_t offset = 0;  // first element in the parameter
  std::int64_t length = 0;
  Variable variable;  // a view of the flat buffer; its gradient a view of the chunk
};

ShardedDataParallelStrategy::ShardedDataParallelStrategy(CommunicatorPtr comm, Device device,
                                                         ShardedDataParallelOptions options)
    : Strategy(device, comm), comm_(std::move(comm)), options_(options) {
  DTRAIN_CHECK(options_.stage >= 1 && options_.stage <= 3,
               "sharded data parallel: stage {} is not a ZeRO stage (1: the optimizer state sharded, 2: the "
               "gradients too, 3: the parameters too)",
               options_.stage);
  DTRAIN_CHECK(options_.bucket_bytes > 0, "sharded data parallel: bucket_bytes must be positive");
  const int ranks = comm_->size(), group = options_.shard_ranks == 0 ? ranks : options_.shard_ranks;
  DTRAIN_CHECK(group >= 1 && ranks % group == 0,
               "sharded data parallel: shard groups of {} rank(s) do not divide the {} ranks (hybrid sharding needs "
               "as many ranks on every host)",
               options_.shard_ranks, ranks);
  shard_comm_ = comm_;
  if (group < ranks) {
    // Row-major: groups of consecutive ranks shard the model; the "replica" groups link the
    // ranks that hold the same chunks.
    const DeviceMesh mesh(comm_, {{"replica", ranks / group}, {"shard", group}});
    shard_comm_ = mesh.group("shard");
    replica_comm_ = mesh.group("replica");
  }
}

ShardedDataParallelStrategy::~ShardedDataParallelStrategy() = default;

DataParallel& ShardedDataParallelStrategy::data_parallel() const {
  DTRAIN_CHECK(ddp_ != nullptr, "sharded data parallel: prepare() the model first");
  return *ddp_;
}

std::shared_ptr<nn::Module> ShardedDataParallelStrategy::prepare(std::shared_ptr<nn::Module> model) {
  DTRAIN_CHECK(model != nullptr, "sharded data parallel: prepare() needs a model");
  DTRAIN_CHECK(ddp_ == nullptr, "sharded data parallel: prepare() was already called");
  model->to(device_);
  DataParallelOptions o;
  o.bucket_bytes = options_.bucket_bytes;
  o.overlap = options_.overlap;
  o.keep_gradients = options_.stage < 2;  // stage 2: only this rank's chunks outlive the exchange
  std::vector<UnitPlan> units;
  if (options_.stage == 3) {
    // The gather units are the buckets, so one flat layout serves parameters and gradients.
    units = plan_units(*model, options_.unit_bytes);
    for (const UnitPlan& u : units) o.buckets.push_back(u.parameters);
  }
  // The chunks' mean across the shard groups travels through NCCL too for a CUDA model.
  CommunicatorPtr across = replica_comm_;
  if (across && !device_.is_cpu() && across->backend() != "nccl") across = nccl_communicator(across, device_);
  o.exchange_factory = [this, across](const CommunicatorPtr& replicas) {
    auto exchange = std::make_unique<ReduceScatterExchange>(replicas, device_, across);
    exchange_ = exchange.get();
    return exchange;
  };
  ddp_ = std::make_unique<DataParallel>(model, shard_comm_, o);
  if (across) {
    // DataParallel made each group equal to its first rank; this makes the groups equal.
    for (const Variable& p : model->parameters()) {
      Tensor t = p.data();
      across->broadcast(t, 0);
    }
    for (auto& [name, b] : model->named_buffers()) across->broadcast(b, 0);
  }

  const int rank = shard_comm_->rank(), ranks = shard_comm_->size();
  const std::vector<BucketLayout>& buckets = exchange_->buckets();
  // Every rank must own some elements, or its optimizer would have nothing to hold; every
  // rank computes the same counts, so all of them refuse together.
  for (int q = 0; q < ranks; ++q) {
    std::int64_t owned = 0;
    for (const BucketLayout& b : buckets) owned += static_cast<std::int64_t>(shard_bucket(b, q, ranks).segments.size());
    DTRAIN_CHECK(owned > 0,
                 "sharded data parallel: rank {} of {} would own no parameter elements (the model's buckets are too "
                 "small to cut {} ways; use fewer ranks or plain data parallelism)",
                 q, ranks, ranks);
  }
  std::map<std::string, Variable> params;
  for (auto& [name, p] : model->named_parameters()) params.emplace(name, p);
  NoGradGuard no_grad;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const BucketLayout& layout = buckets[b];
    const BucketShard& shard = exchange_->shard(b);
    // The bucket's parameters move into one flat buffer (padding at the end), so that the
    // all-gather of the chunks writes the parameters themselves.
    Tensor flat = Tensor::zeros({shard.padded}, {layout.dtype, device_});
    for (const BucketLayout::Member& m : layout.members) {
      Variable& p = params.at(m.name);
      Tensor region = flat.narrow(0, m.offset, p.numel());
      region.copy_(p.data().reshape({p.numel()}));
      p.set_data(region.view(m.shape));
    }
    flat_.push_back(std::move(flat));
  }
  // Stage 3: from here on this rank keeps only its chunks; the flat buffers are whole only
  // while the gatherer needs them.
  if (options_.stage == 3) {
    gatherer_ = std::make_unique<LayerGatherer>(data_parallel().tensor_communicator(), std::move(units), buckets,
                                                std::move(flat_), model);
    flat_.clear();
  }
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const BucketLayout& layout = buckets[b];
    const BucketShard& shard = exchange_->shard(b);
    const Tensor chunk = gatherer_ ? gatherer_->chunk(b) : flat_[b].narrow(0, shard.chunk * rank, shard.chunk);
    const Tensor& gradients = exchange_->gradient_chunk(b);
    for (const ShardSegment& s : shard.segments) {
      const BucketLayout::Member& m = layout.members[s.member];
      const std::vector<std::int64_t> shape = slice_shape(s.length, m.shape.size());
      Variable v(chunk.narrow(0, s.at, s.length).view(shape), true);
      v.set_grad(gradients.narrow(0, s.at, s.length).view(shape));
      slices_.push_back({m.name, s.offset, s.length, std::move(v)});
    }
  }
  module_ = std::move(model);
  return module_;
}

std::int64_t ShardedDataParallelStrategy::shard_elements() const {
  std::int64_t n = 0;
  for (const Slice& s : slices_) n += s.length;
  return n;
}

void ShardedDataParallelStrategy::forward_backward(const MicroBatch& batch, double weight, bool last,
                                                   const StepConfig& config, StepStats& stats) {
  // Gradient accumulation: only the update's last backward communicates (the sum).
  data_parallel().run_micro_batch(last, [&] { Strategy::forward_backward(batch, weight, last, config, stats); });
}

void ShardedDataParallelStrategy::exchange_gradients() {
  data_parallel().finish_gradient_sync();
  // A unit whose parameters got no gradient (unused in this step) is still whole.
  if (gatherer_) gatherer_->release_all();
}

ShardedDataParallelStrategy::WholeParameters::WholeParameters(LayerGatherer* gatherer) : gatherer_(gatherer) {
  if (gatherer_) gatherer_->gather_all();
}

ShardedDataParallelStrategy::WholeParameters::~WholeParameters() {
  if (gatherer_) gatherer_->release_all();
}

std::size_t ShardedDataParallelStrategy::gather_units() const { return gatherer_ ? gatherer_->units() : 0; }

std::size_t ShardedDataParallelStrategy::take_peak_whole_units() {
  return gatherer_ ? gatherer_->take_peak_whole() : 0;
}

optim::Optimizer& ShardedDataParallelStrategy::stepped_optimizer(optim::Optimizer& given) {
  if (!shard_optimizer_) {
    // Whole tensors are numbered the same way on every rank: bucket by bucket, member by member.
    std::map<std::string, std::size_t> whole;
    for (const BucketLayout& b : exchange_->buckets()) {
      for (const BucketLayout::Member& m : b.members) whole.emplace(m.name, whole.size());
    }
    std::vector<Variable> variables;
    optim::Optimizer::SliceNorms norms;
    for (const Slice& s : slices_) {
      variables.push_back(s.variable);
      norms.tensor_of.push_back(whole.at(s.parameter));
    }
    norms.tensors = whole.size();
    norms.sum_over_ranks = [comm = shard_comm_](Tensor& t) { comm->all_reduce(t, ReduceOp::Sum); };
    shard_optimizer_ = given.rebind_slices(std::move(variables), std::move(norms));
  }
  shard_optimizer_->set_lr(given.lr());  // an LR schedule sets the given one
  return *shard_optimizer_;
}

void ShardedDataParallelStrategy::apply_update(optim::Optimizer& optimizer, const StepConfig& config, bool nonfinite) {
  Strategy::apply_update(optimizer, config, nonfinite);
  if (!gatherer_) gather_parameters();  // stage 3: the next forward gathers the updated chunks
}

void ShardedDataParallelStrategy::gather_parameters() {
  trace::Span span("parameter all-gather", trace::Phase::Communication);
  const CommunicatorPtr& comm = data_parallel().tensor_communicator();
  const int rank = comm->rank(), ranks = comm->size();
  std::vector<WorkPtr> works;
  for (std::size_t b = 0; b < flat_.size(); ++b) {
    const std::int64_t chunk = flat_[b].numel() / ranks;
    // In place: this rank's chunk is its own slot of the gathered bucket.
    Tensor out = flat_[b].view({ranks, chunk});
    works.push_back(comm->all_gather_async(flat_[b].narrow(0, chunk * rank, chunk), out));
  }
  for (const WorkPtr& w : works) w->wait();
}

void ShardedDataParallelStrategy::reduce_sums(Tensor& sums) { comm_->all_reduce(sums, ReduceOp::Sum); }

Capabilities ShardedDataParallelStrategy::capabilities() {
  if (gatherer_) return {};  // stage 3 keeps no replica of the parameters to compare
  return {.replica_divergence = [this] { return data_parallel().check_replicas(); }};
}

CheckpointPlan ShardedDataParallelStrategy::checkpoint_plan() const {
  const int rank = comm_->rank();
  // Under hybrid sharding the first group writes; the others hold the same chunks.
  const bool writes = !replica_comm_ || replica_comm_->rank() == 0;
  CheckpointPlan plan{.rank = rank,
                      .ranks = comm_->size(),
                      .part = !writes     ? ""
                              : rank == 0 ? "model"
                                          : fmt::format("shard{}", rank),
                      .replicas = comm_->size()};
  plan.saves_model = rank == 0 || gatherer_;  // the replicas' parameters are identical, or each rank holds its own
  if (gatherer_) {
    // Each rank's chunks of the parameters as element ranges; rank 0 adds the buffers.
    plan.model_share = [this] {
      nn::StateDict out;
      for (const Slice& s : slices_) {
        out.emplace_back(fmt::format("{}[{}:{}]", s.parameter, s.offset, s.offset + s.length),
                         s.variable.data().reshape({s.length}));
      }
      if (comm_->rank() == 0) {
        for (auto& [name, b] : module_->named_buffers()) out.emplace_back(name, b);
      }
      return out;
    };
    plan.load_model_share = [self = const_cast<ShardedDataParallelStrategy*>(this)](const nn::StateDict& whole) {
      std::map<std::string, Tensor> by_name(whole.begin(), whole.end());
      NoGradGuard no_grad;
      for (const Slice& s : self->slices_) {
        const Tensor& t = by_name.at(s.parameter);
        Tensor target = s.variable.data();
        target.copy_(t.reshape({t.numel()}).narrow(0, s.offset, s.length).reshape(target.shape()));
      }
      for (auto& [name, b] : self->module_->named_buffers()) b.copy_(by_name.at(name));
    };
  }
  // Each rank's chunks of the optimizer state, as element ranges of whole parameters.
  plan.optimizer_share = [this](const optim::Optimizer& given) {
    optim::NamedTensors out;
    if (!shard_optimizer_) {  // no step yet: nothing but the counters
      out.emplace_back("lr", Tensor::scalar(given.lr(), {DType::f64}));
      out.emplace_back("steps", Tensor::scalar(0, {DType::i64}));
      return out;
    }
    const optim::NamedTensors state = shard_optimizer_->state_view();
    for (const auto& [key, t] : state) {
      if (key == "lr" || key == "steps") {
        out.emplace_back(key, t);
      } else if (key == "updates") {
        const std::vector<std::int64_t> counts = t.to_vector<std::int64_t>();
        for (std::size_t i = 0; i < slices_.size(); ++i) {
          out.emplace_back(slices_[i].parameter + "/updates",
                           Tensor::scalar(static_cast<double>(counts[i]), {DType::i64}));
        }
      } else {
        const auto dot = key.rfind('.');
        const Slice& s = slices_.at(std::stoul(key.substr(dot + 1)));
        out.emplace_back(fmt::format("{}[{}:{}]/{}", s.parameter, s.offset, s.offset + s.length, key.substr(0, dot)),
                         t.reshape({s.length}));
      }
    }
    return out;
  };
  // The whole state by parameter name (joined from any number of ranks' ranges, or one
  // process's whole tensors): this rank takes its slices of it.
  // The hook runs later, from the Checkpointer's restore, on this same (non-const) strategy.
  plan.load_optimizer_share = [self = const_cast<ShardedDataParallelStrategy*>(this)](
                                  optim::Optimizer& given, const optim::NamedTensors& whole) {
    const std::vector<Slice>& slices = self->slices_;
    std::map<std::string, std::vector<std::size_t>> by_parameter;
    for (std::size_t i = 0; i < slices.size(); ++i) by_parameter[slices[i].parameter].push_back(i);
    optim::NamedTensors state;
    std::vector<std::int64_t> updates(slices.size(), 0);
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
        const Slice& s = slices[i];
        if (what == "updates") {
          updates[i] = static_cast<std::int64_t>(t.item());
        } else {
          state.emplace_back(fmt::format("{}.{}", what, i),
                             t.reshape({t.numel()}).narrow(0, s.offset, s.length).reshape(s.variable.shape()));
        }
      }
    }
    state.emplace_back("updates", Tensor::from_vector(updates, {static_cast<std::int64_t>(updates.size())}));
    self->stepped_optimizer(given).load_state(state);
  };
  return plan;
}

namespace {

// The ranks of each host, when every host has as many and holds consecutive ranks (as
// mpirun places them by slot); collective. Hosts: MPI's shared-memory split, or
// DTRAIN_HOST_ID (communicator.h); one process without MPI is one host.
int ranks_per_host(Communicator& world) {
  const int local = detail::mpi_host_rank();
  if (local < 0) return world.size();
  Tensor mine = Tensor::full({1}, static_cast<double>(local), {DType::f64});
  Tensor all = Tensor::empty({world.size(), 1}, {DType::f64});
  world.all_gather(mine, all);
  const std::vector<double> locals = all.to_vector<double>();
  const int per_host = static_cast<int>(*std::max_element(locals.begin(), locals.end())) + 1;
  bool consecutive = world.size() % per_host == 0;
  for (int r = 0; r < world.size(); ++r) consecutive = consecutive && locals[r] == r % per_host;
  DTRAIN_CHECK(consecutive,
               "sharded data parallel, hybrid: the hosts do not hold equal runs of consecutive ranks (up to {} per "
               "host among {}); start as many ranks on every host, placed by slot (mpirun --map-by slot), or set "
               "DTRAIN_HOST_ID",
               per_host, world.size());
  return per_host;
}

}  // namespace

std::shared_ptr<Strategy> make_sharded_data_parallel(StrategySpec& spec, const CommunicatorPtr& world, Device device,
                                                     const StrategyHints&) {
  ShardedDataParallelOptions o;
  o.stage = spec.integer("zero", 1);
  DTRAIN_CHECK(o.stage >= 1 && o.stage <= 3, "strategy spec '{}': zero={} must be a ZeRO stage, 1, 2 or 3", spec.text(),
               o.stage);
  const int dp = spec.integer("dp", world->size());
  DTRAIN_CHECK(dp == world->size(), "strategy spec '{}': dp={} but the job has {} ranks", spec.text(), dp,
               world->size());
  if (o.stage == 3) {
    DTRAIN_CHECK(!spec.has("bucket_mb"),
                 "strategy spec '{}': at zero=3 the gradient buckets are the gather units; size them with gather_mb, "
                 "not bucket_mb",
                 spec.text());
    // 0: every layer a unit of its own.
    o.unit_bytes = static_cast<std::size_t>(spec.number("gather_mb", 4.0, /*zero_allowed=*/true) * (1 << 20));
  } else {
    DTRAIN_CHECK(!spec.has("gather_mb"),
                 "strategy spec '{}': gather_mb sizes stage 3's gather units, and zero={} gathers no layers",
                 spec.text(), o.stage);
    o.bucket_bytes = static_cast<std::size_t>(spec.number("bucket_mb", 4.0) * (1 << 20));
  }
  o.overlap = spec.flag("overlap", true);
  DTRAIN_CHECK(!(spec.has("hybrid") && spec.has("shard")),
               "strategy spec '{}': hybrid (shard inside each host) and shard=N (inside N ranks) exclude each other",
               spec.text());
  if (spec.flag("hybrid", false)) o.shard_ranks = ranks_per_host(*world);
  o.shard_ranks = spec.integer("shard", o.shard_ranks);
  return std::make_shared<ShardedDataParallelStrategy>(world, device, o);
}

}  // namespace dtrain::dist
