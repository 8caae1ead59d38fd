#include "dtrain/dist/strategy/parallel_dims.h"

#include "dtrain/core/error.h"
#include "dtrain/dist/strategy/strategy_factory.h"

#include <fmt/format.h>

namespace dtrain::dist {

std::vector<MeshDim> ParallelDims::mesh_dims() const {
  return {{"dp_replicate", dp_replicate}, {"dp_shard", dp_shard}, {"pp", pp}};
}

std::shared_ptr<const DeviceMesh> ParallelDims::mesh(const CommunicatorPtr& world) const {
  return std::make_shared<DeviceMesh>(
      world, mesh_dims(),
      std::vector<MeshFlat>{{"dp", {"dp_replicate", "dp_shard"}}, {"dp_shard_pp", {"dp_shard", "pp"}}});
}

std::string ParallelDims::describe() const {
  std::string out = fmt::format("pp={} x dp={}", pp, dp());
  if (zero > 0) out += fmt::format(" (zero={} over {})", zero, dp_shard);
  return out;
}

ParallelDims parse_parallel_dims(StrategySpec& spec, int world_size, const std::function<int()>& ranks_per_host) {
  for (const char* key : {"tp", "cp"}) {
    DTRAIN_CHECK(!spec.has(key),
                 "strategy spec '{}': {} ({} parallelism) is not offered yet; the dimensions are pp, dp and zero "
                 "(with shard or hybrid)",
                 spec.text(), key, std::string(key) == "tp" ? "tensor" : "context");
  }
  ParallelDims d;
  if (spec.has("pp")) {
    d.pp = spec.integer("pp", 0);
    DTRAIN_CHECK(d.pp >= 1, "strategy spec '{}': pp needs the number of stages (pp=K)", spec.text());
  }
  DTRAIN_CHECK(world_size % d.pp == 0, "strategy spec '{}': {} ranks is not a multiple of the {} stages", spec.text(),
               world_size, d.pp);
  const int dp = spec.integer("dp", world_size / d.pp);
  if (d.pp == 1) {
    DTRAIN_CHECK(dp == world_size, "strategy spec '{}': dp={} but the job has {} ranks", spec.text(), dp, world_size);
  } else {
    DTRAIN_CHECK(dp * d.pp == world_size, "strategy spec '{}': pp={} x dp={} is {} ranks, the job has {}", spec.text(),
                 d.pp, dp, dp * d.pp, world_size);
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
