// ZeRO stage 1's optimizer side (private to dist), shared by ZeroStrategy and
// the sharded optimizer of PipelineStrategy's replicas (Megatron's "distributed optimizer").
// The ReduceScatterExchange leaves this rank chunk r of every averaged gradient bucket
// (shard_layout.h); OptimizerShards cuts this rank's chunk of the parameters into slices, one
// per parameter the chunk touches, each a variable viewing the parameters' chunk with the
// gradients' chunk as its gradient, rebinds the caller's optimizer to them (its state is
// then 1/N of a replica's), and saves and loads that state as element ranges of whole
// parameters, so that a checkpoint loads into any number of ranks.
#pragma once

#include "dist/zero/reduce_scatter_exchange.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/layers/module.h"
#include "dtrain/optim/optimizer.h"

#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

// A DataParallelOptions::exchange_factory making the ReduceScatterExchange (over the
// replicas DataParallel hands it, averaged `across` and moved as `wire`, or through the
// registry's exchange `codec` ("powersgd:4"; empty: none), as that constructor says), and
// pointing *made at it (owned by the reducer).
GradientExchangeFactory reduce_scatter_factory(Device device, ReduceScatterExchange** made,
                                               CommunicatorPtr across = nullptr, DType wire = DType::f32,
                                               std::string codec = {});

// Moves each of the exchange's buckets of `module`'s parameters into one flat buffer on
// `device`, padded to a multiple of the ranks (the parameters become views of it), so that
// an all-gather of the chunks writes the parameters themselves. Returns the buffers.
std::vector<Tensor> flatten_buckets(nn::Module& module, const ReduceScatterExchange& exchange, Device device);
// Rank `rank`'s chunk of each flat buffer (views).
std::vector<Tensor> own_chunks(const std::vector<Tensor>& flat, int rank, int ranks);
// Every rank's updated chunk into every rank's flat buffers, in place (collective over `comm`).
void all_gather_chunks(Communicator& comm, std::vector<Tensor>& flat);

// Throws, on every rank, when one of the `ranks` would own no parameter element (buckets
// too small to cut that many ways): its optimizer would have nothing to hold. Call it
// before cutting anything.
void check_every_rank_owns_elements(const ReduceScatterExchange& exchange, int ranks);

class OptimizerShards {
 public:
  // `chunks[b]`: this rank's chunk of bucket b's parameters (the slices view it); `comm`:
  // the ranks the buckets are cut among (check_every_rank_owns_elements first).
  OptimizerShards(CommunicatorPtr comm, const ReduceScatterExchange& exchange, const std::vector<Tensor>& chunks);

  // The slices (the variables the optimizer steps) of the parameters named `parameters`.
  std::vector<Variable> slices_of(const std::set<std::string>& parameters) const;
  // Elements this rank updates and holds optimizer state for.
  std::int64_t elements() const;
  // The given optimizer rebound to the slices (Optimizer::rebind_slices) at the first call;
  // at every call it takes the given one's learning rate (an LR schedule sets that one).
  // LARS and LAMB sum their slices' squared norms over `comm`.
  optim::Optimizer& optimizer(const optim::Optimizer& given);
  const optim::Optimizer* optimizer() const { return optimizer_.get(); }

  // Sets the plan's optimizer_share and load_optimizer_share to save_state and load_state
  // (the hooks hold this object: it must outlive the plan's use).
  void share_through(CheckpointPlan& plan);
  // CheckpointPlan::optimizer_share: this rank's state, "<parameter>[begin:end]/<buffer>",
  // "<parameter>/updates", "lr" and "steps" (only the counters before the first step).
  optim::NamedTensors save_state(const optim::Optimizer& given) const;
  // CheckpointPlan::load_optimizer_share: this rank's slices of the whole state by parameter
  // name (from any number of ranks' ranges joined, or one process's whole tensors); entries
  // of parameters this rank has no slice of are skipped.
  void load_state(optim::Optimizer& given, const optim::NamedTensors& whole);
  // Stage 3's model share: the slices' parameter values, "<parameter>[begin:end]"; and their
  // values taken from whole tensors by name.
  nn::StateDict parameter_ranges() const;
  void load_parameters(const std::map<std::string, Tensor>& whole);

 private:
  // One segment of this rank's chunk of a bucket, as the optimizer sees it.
  struct Slice {
    std::string parameter;    // its name in the module
    std::int64_t offset = 0;  // first element in the parameter
    std::int64_t length = 0;
    std::size_t tensor = 0;  // the whole parameter's index, the same on every rank
    Variable variable;       // a view of the chunk; its gradient a view of the gradients' chunk
  };
  std::string range_of(const Slice& s) const;

  CommunicatorPtr comm_;
  std::vector<Slice> slices_;
  std::size_t tensors_ = 0;  // whole parameters over all buckets
  std::unique_ptr<optim::Optimizer> optimizer_;
};

}  // namespace dtrain::dist
