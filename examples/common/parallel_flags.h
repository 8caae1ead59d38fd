// How an example trainer is distributed: --parallel SPEC (dist::make_strategy's spec,
// dtrain/dist/strategy/strategy_factory.h), and the older flags, kept as aliases that add keys to
// the spec (--pipeline-stages K is pp=K, --strategy ps is ps, --num-ps S is ps=S,
// --ps-mode M is mode=M, --backup-workers B is backup=B, --grad-compression C is
// exchange=C, ...). A key given both ways is an error naming it. Later options are spec
// keys or kinds, not new flags.
#pragma once

#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/dist/strategy/strategy_factory.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::examples {

struct ParallelFlags {
  std::string spec;  // --parallel
  // The aliases, each set only when given.
  std::optional<int> pipeline_stages, micro_batches, virtual_stages, num_ps, backup_workers;
  std::optional<std::string> pipeline_schedule, pipeline_balance, ps_mode, grad_compression;
  std::vector<int> pipeline_cuts;
  bool recompute = false;
  std::vector<int> recompute_stages;
  std::string strategy = "auto";  // auto or ps
  // Parameter-server roles from a TF_CONFIG-style file (or the DTRAIN_CLUSTER variable):
  // they set ps=<its ps tasks>.
  std::string cluster;
};
void add_parallel_flags(CLI::App& app, ParallelFlags& p);

// The spec the flags describe ("" for the default: data parallel under mpirun), after
// reading and checking the cluster file or variable against `world`.
std::string parallel_spec(const ParallelFlags& p, dist::Communicator& world);

// The strategy of the flags (collective). `hints`: for a pipeline balanced by time.
std::shared_ptr<dist::Strategy> make_strategy(const ParallelFlags& p, const dist::CommunicatorPtr& world, Device device,
                                              const dist::StrategyHints& hints);

// One line on the layout for the reporting rank ("" for plain data parallelism): a
// pipeline's stages and cut points, or the parameter servers' roles.
std::string describe_layout(const dist::Strategy& strategy, int world_size);

}  // namespace dtrain::examples
