#include "dist/zero/replica_sync.h"

#include "dist/zero/layer_gatherer.h"
#include "dist/zero/optimizer_shards.h"
#include "dist/zero/reduce_scatter_exchange.h"
#include "dtrain/autograd/variable.h"

namespace dtrain::dist {

ReplicaSync::ReplicaSync(std::shared_ptr<nn::Module> module, CommunicatorPtr shard, CommunicatorPtr replicate,
                         Device device, ReplicaSyncOptions options)
    : options_(std::move(options)), module_(module) {
  DTRAIN_CHECK(options_.zero >= 0 && options_.zero <= 3,
               "replica sync: zero={} is not a ZeRO stage (0 for none, 1: the optimizer state sharded, 2: the "
               "gradients too, 3: the parameters too)",
               options_.zero);
  DTRAIN_CHECK(options_.zero > 0 || !replicate, "replica sync: a replicate group is hybrid sharding's: give zero=1-3");
  DataParallelOptions o = options_.data_parallel;
  std::vector<UnitPlan> units;
  if (options_.zero > 0) {
    DTRAIN_CHECK(!o.exchange_factory,
                 "replica sync: zero={} reduce-scatters its buckets; a gradient exchange of its own is zero 0's",
                 options_.zero);
    o.keep_gradients = options_.zero < 2;  // stage 2: only this rank's chunks outlive the exchange
    if (options_.zero == 3) {
      // The gather units are the buckets, so one flat layout serves parameters and gradients.
      units = plan_units(*module, options_.unit_bytes);
      for (const UnitPlan& u : units) o.buckets.push_back(u.parameters);
    }
    DTRAIN_CHECK(!replicate || device.is_cpu() || replicate->backend() == "nccl",
                 "replica sync: the replicate group of a CUDA model must take its tensors (the mesh's tensor_group)");
    DTRAIN_CHECK(options_.codec.empty() || options_.zero <= 2,
                 "replica sync: zero=3 keeps no whole gradients for {} to compress (its factors and error feedback "
                 "are per whole matrix); it runs with zero=1 or 2",
                 options_.codec);
    o.exchange_factory = reduce_scatter_factory(device, &exchange_, replicate, options_.wire, options_.codec);
  }
  ddp_ = std::make_unique<DataParallel>(module, shard, o);
  if (replicate) {
    // DataParallel made each group equal to its first rank; this makes the groups equal.
    for (const Variable& p : module->parameters()) {
      Tensor t = p.data();
      replicate->broadcast(t, 0);
    }
    for (auto& [name, b] : module->named_buffers()) replicate->broadcast(b, 0);
  }
  if (options_.zero == 0) return;
  check_every_rank_owns_elements(*exchange_, shard->size());
  flat_ = flatten_buckets(*module, *exchange_, device);
  const CommunicatorPtr& comm = ddp_->tensor_communicator();
  std::vector<Tensor> chunks = own_chunks(flat_, comm->rank(), comm->size());
  // Stage 3: from here on this rank keeps only its chunks; the flat buffers are whole only
  // while the gatherer needs them.
  if (options_.zero == 3) {
    gatherer_ = std::make_unique<LayerGatherer>(comm, std::move(units), exchange_->buckets(), std::move(flat_), module);
    gatherer_->release_on_gradients(!options_.release_after_passes);
    flat_.clear();
    chunks.clear();
    for (std::size_t b = 0; b < exchange_->buckets().size(); ++b) chunks.push_back(gatherer_->chunk(b));
  }
  shards_ = std::make_unique<OptimizerShards>(shard, *exchange_, chunks);
}

ReplicaSync::~ReplicaSync() = default;

void ReplicaSync::share_parameters_through(CheckpointPlan& plan, bool buffers) {
  if (!gatherer_) return;
  plan.model_share = [this, buffers] {
    nn::StateDict out = shards_->parameter_ranges();
    if (buffers) {
      for (auto& [name, b] : module_->named_buffers()) out.emplace_back(name, b);
    }
    return out;
  };
  // Every rank takes its chunks from the whole tensors (the buffers too: all hold them).
  plan.load_model_share = [this](const nn::StateDict& whole) {
    const std::map<std::string, Tensor> by_name(whole.begin(), whole.end());
    shards_->load_parameters(by_name);
    NoGradGuard no_grad;
    for (auto& [name, b] : module_->named_buffers()) b.copy_(by_name.at(name));
  };
}

void ReplicaSync::finish() {
  ddp_->finish_gradient_sync();
  // A unit whose parameters got no gradient (unused in this step) is still whole.
  if (gatherer_) gatherer_->release_all();
}

optim::Optimizer& ReplicaSync::stepped_optimizer(optim::Optimizer& given) {
  return shards_ ? shards_->optimizer(given) : given;
}

void ReplicaSync::share_exchange_state_through(CheckpointPlan& plan) {
  if (options_.codec.empty()) return;
  plan.rank_state = [ddp = ddp_.get()] { return ddp->exchange_state(); };
  plan.load_rank_state = [ddp = ddp_.get()](const std::vector<std::pair<std::string, Tensor>>& state) {
    ddp->load_exchange_state(state);
  };
}

void ReplicaSync::end_pass() {
  if (gatherer_ && options_.release_after_passes) gatherer_->release_all();
}

void ReplicaSync::after_update() {
  if (shards_ && !gatherer_) all_gather_chunks(*ddp_->tensor_communicator(), flat_);
}

std::optional<double> ReplicaSync::replica_divergence() {
  if (gatherer_) return std::nullopt;  // stage 3 keeps no replica of the parameters to compare
  return ddp_->check_replicas();
}

std::int64_t ReplicaSync::shard_elements() const { return shards_ ? shards_->elements() : 0; }

const optim::Optimizer* ReplicaSync::shard_optimizer() const { return shards_ ? shards_->optimizer() : nullptr; }

}  // namespace dtrain::dist
