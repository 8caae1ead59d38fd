// ParallelDims: the job's parallel dimensions, read once from a strategy spec (the one
// grammar every built-in kind but parameter servers shares) and checked against the job's
// size before any strategy is built, as torchtitan's ParallelDims is.
//
//   pp=P       pipeline stages (default 1)
//   dp=R       data-parallel replicas (default: the ranks left, world / pp)
//   zero=S     ZeRO stage 1-3 over the replicas (bare `zero`: 1)
//   shard=G    the ranks a ZeRO shard spans (default every replica: dp_shard = R); the
//              groups of G replicate each other (dp_replicate = R / G: hybrid sharding)
//   hybrid     shard = the ranks of one host
//   tp=T       tensor parallelism: each layer split over T ranks (tensor_parallel/parallelize.h)
//   sp         with tp: sequence parallelism (norms and residuals on sequence shards)
//   cp=C       context parallelism: refused until it is offered
//
// The product pp x dp x tp is the world's size. Refused, naming the keys: a size that does
// not fit, shard or hybrid without zero, shard and hybrid together, a shard that does not
// divide dp, sp without tp, cp.
//
// The mesh's dimensions come in a fixed order, the slowest first: dp_replicate, dp_shard,
// pp, tp (the rank layout dtrain has always used: a pipeline's stages are consecutive ranks,
// a shard group consecutive replicas; a tensor-parallel group consecutive ranks, one host's
// fast links), with room for cp after tp.
#pragma once

#include "dtrain/dist/strategy/device_mesh.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

class StrategySpec;

struct ParallelDims {
  int pp = 1;            // pipeline stages
  int dp_replicate = 1;  // groups holding the same shards (the same replica without zero)
  int dp_shard = 1;      // ranks a ZeRO shard spans (1 without zero)
  int zero = 0;          // ZeRO stage, 0 for none
  int tp = 1;            // tensor-parallel ranks per layer
  bool sp = false;       // sequence parallelism inside the tensor-parallel groups

  int dp() const { return dp_replicate * dp_shard; }  // the data-parallel replicas
  int size() const { return pp * dp() * tp; }
  // The mesh's dimensions in the fixed order (dimensions of size 1 are kept: every mesh has
  // the same names).
  std::vector<MeshDim> mesh_dims() const;
  // The job's mesh over `world` (collective): mesh_dims(), "dp" flattened from
  // dp_replicate and dp_shard (a stage's replicas), and "dp_shard_pp" from dp_shard, pp and
  // tp (the ranks that hold disjoint parts of one sharded replica); with tp > 1 also "pp_tp"
  // (one replica's parts without sharding) and "dp_pp" (every dimension but tp: the ranks
  // whose evaluation sums add up). Every strategy of the factory but parameter servers
  // takes its groups from it.
  std::shared_ptr<const DeviceMesh> mesh(const CommunicatorPtr& world) const;
  // "pp=2 x dp=2 (zero=1 over 2)", for messages and the layout line.
  std::string describe() const;
};

// Reads pp, dp, zero, shard, hybrid, tp, sp (and refuses cp) from `spec` for a job of
// `world_size` ranks. `ranks_per_host` is called only for `hybrid` (it may communicate).
ParallelDims parse_parallel_dims(StrategySpec& spec, int world_size, const std::function<int()>& ranks_per_host);

}  // namespace dtrain::dist
