#include "dtrain/dist/strategy/parallel_dims.h"

#include "dtrain/core/error.h"
#include "dtrain/dist/strategy/strategy_factory.h"

#include <fmt/format.h>

namespace dtrain::dist {

std::vector<MeshDim> ParallelDims::mesh_dims() const {
  return {{"dp_replicate", dp_replicate}, {"dp_shard", dp_shard}, {"pp", pp}, {"tp", tp}};
}

std::shared_ptr<const DeviceMesh> ParallelDims::mesh(const CommunicatorPtr& world) const {
  std::vector<MeshFlat> flat{{"dp", {"dp_replicate", "dp_shard"}}, {"dp_shard_pp", {"dp_shard", "pp", "tp"}}};
  if (tp > 1) {
    flat.push_back({"pp_tp", {"pp", "tp"}});
    flat.push_back({"dp_pp", {"dp_replicate", "dp_shard", "pp"}});
  }
  return std::make_shared<DeviceMesh>(world, mesh_dims(), std::move(flat));
}

std::string ParallelDims::describe() const {
  std::string out = fmt::format("pp={} x dp={}", pp, dp());
  if (zero > 0) out += fmt::format(" (zero={} over {})", zero, dp_shard);
  if (tp > 1) out += fmt::format(" x tp={}{}", tp, sp ? " (sequence parallel)" : "");
  return out;
}

ParallelDims parse_parallel_dims(StrategySpec& spec, int world_size, const std::function<int()>& ranks_per_host) {
  DTRAIN_CHECK(!spec.has("cp"),
               "strategy spec '{}': cp (context parallelism) is not offered yet; the dimensions are pp, dp, tp and "
               "zero (with shard or hybrid)",
               spec.text());
  ParallelDims d;
  if (spec.has("tp")) {
    d.tp = spec.integer("tp", 0);
    DTRAIN_CHECK(d.tp >= 1, "strategy spec '{}': tp needs the number of ranks per layer (tp=T)", spec.text());
  }
  d.sp = spec.flag("sp");
  DTRAIN_CHECK(!d.sp || d.tp > 1,
               "strategy spec '{}': sp (sequence parallelism) splits inside tensor-parallel "
               "groups: give tp=T (T > 1) with it",
               spec.text());
  if (spec.has("pp")) {
    d.pp = spec.integer("pp", 0);
    DTRAIN_CHECK(d.pp >= 1, "strategy spec '{}': pp needs the number of stages (pp=K)", spec.text());
  }
  DTRAIN_CHECK(world_size % d.pp == 0, "strategy spec '{}': {} ranks is not a multiple of the {} stages", spec.text(),
               world_size, d.pp);
  DTRAIN_CHECK(world_size % (d.pp * d.tp) == 0, "strategy spec '{}': {} ranks is not a multiple of pp={} x tp={}",
               spec.text(), world_size, d.pp, d.tp);
  const int dp = spec.integer("dp", world_size / (d.pp * d.tp));
  if (d.pp == 1 && d.tp == 1) {
    DTRAIN_CHECK(dp == world_size, "strategy spec '{}': dp={} but the job has {} ranks", spec.text(), dp, world_size);
  } else {
    const std::string tp = d.tp > 1 ? fmt::format(" x tp={}", d.tp) : "";
    DTRAIN_CHECK(dp * d.pp * d.tp == world_size, "strategy spec '{}': pp={} x dp={}{} is {} ranks, the job has {}",
                 spec.text(), d.pp, dp, tp, dp * d.pp * d.tp, world_size);
  }
  d.dp_replicate = dp;
  const bool hybrid = spec.has("hybrid"), shard = spec.has("shard");
  if (spec.has("zero")) {
    d.zero = spec.integer("zero", 1);
    DTRAIN_CHECK(d.zero >= 1 && d.zero <= 3, "strategy spec '{}': zero={} must be a ZeRO stage, 1, 2 or 3", spec.text(),
                 d.zero);
  } else {
    DTRAIN_CHECK(!hybrid && !shard,
                 "strategy spec '{}': {} sets the ranks a ZeRO shard spans: give zero=1, 2 or 3 with it", spec.text(),
                 hybrid ? "hybrid" : "shard");
    return d;
  }
  DTRAIN_CHECK(!(hybrid && shard),
               "strategy spec '{}': hybrid (shard inside each host) and shard=N (inside N ranks) exclude each other",
               spec.text());
  if (hybrid) spec.flag("hybrid");
  const int group = hybrid ? ranks_per_host() : spec.integer("shard", dp);
  DTRAIN_CHECK(dp % group == 0,
               "strategy spec '{}': shard groups of {} rank(s) do not divide the {} ranks (hybrid sharding needs as "
               "many ranks on every host)",
               spec.text(), group, dp);
  d.dp_shard = group;
  d.dp_replicate = dp / group;
  return d;
}

}  // namespace dtrain::dist
