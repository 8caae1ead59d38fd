// make_strategy: any distribution strategy from a short spec, the one place that turns a
// job's shape into a Strategy (both example trainers and bench_scaling use it).
//
//   auto strategy = dist::make_strategy("pp=2,micro=8,schedule=1f1b", dist::world(), device);
//
// A spec is comma-separated items, `key=value` or a bare `key` (a flag, or a dimension that
// takes every rank left). It names the job's dimensions and their options; the strategy is
// the most specific kind it names: `ps` (parameter servers), then `pp` (a pipeline, with
// data-parallel replicas when the world holds several pipelines), then `zero` (sharded data
// parallelism), then `dp` or `local`; a
// kind registered by the program outranks the built-in ones. "" is `dp` (`local` on one
// rank). The dimensions (`pp`, `dp`, `zero` with `shard` or `hybrid`) are one grammar for
// every kind but `ps`, read and checked by parse_parallel_dims (parallel_dims.h) before a
// strategy is built; `ps` refuses them. Every key must be used by the chosen kind; an
// unknown key, a bad value, a shape that does not fit the world or a combination no kind
// offers is an error naming the spec and the key.
//
// | spec (examples)                       | strategy                                              |
// |---------------------------------------|-------------------------------------------------------|
// | `dp`, `dp=4`                          | DataParallelStrategy over every rank (LocalStrategy on 1) |
// | `local`                               | LocalStrategy (one rank)                              |
// | `pp=2,micro=8,schedule=1f1b`          | PipelineStrategy, 2 stages x world/2 replicas         |
// | `pp=2,dp=2,schedule=interleaved,virtual=2` | the same, the grid stated                        |
// | `ps=1,mode=async`, `ps=2,mode=ssp:3`  | ParameterServerStrategy, the last ranks serve         |
// | `pp=2,dp=2,zero=1`, `pp=2,zero=2,shard=1` | the same, each stage sharded over its replicas (ZeRO-1/2, hybrid) |
// | `zero=1`, `zero=2`, `zero=3`          | ZeroStrategy (ZeRO stage 1, 2 or 3)    |
// | `zero=2,hybrid`, `zero=3,shard=4`     | the same, sharded inside each host / 4 ranks          |
//
// Keys: dp: `dp[=N]`, `bucket_mb=MB`, `exchange=KIND` (gradient_exchange.h), `sync_bn`,
// `overlap=0|1`. pp: `pp=K`, `dp=D`, `micro=M`, `schedule=gpipe|1f1b|interleaved|zb-h1|zb-v`,
// `virtual=V`, `cuts=A:B:...` (layer indices), `balance=params|time`, `recompute` (every
// stage) or `recompute_stages=A:B:...`, `zero=1|2|3` (each stage's optimizer state, gradients
// and parameters, sharded over its replicas; `gather_mb=MB` at 3) with `shard=N`/`hybrid`
// and `exchange=fp16|bf16|powersgd:R[:W]` (PowerSGD at zero=1|2), and the dp keys for the replicas.
// ps: `ps=S`, `mode=sync|async|ssp:K`, `bucket_mb=MB`, `stale_lr=0|1` and `dc=LAMBDA` (async and
// ssp: PsOptions::staleness_lr, delay_compensation), `backup=B` (sync: backup_workers),
// `lost=SECONDS` (async and ssp: lost_after; 0: never; default half of StrategyHints::timeout). zero:
// `zero=STAGE` (1, 2 or 3), `dp=N`, `bucket_mb=MB` (stages 1 and 2), `gather_mb=MB` (stage 3's
// gather units; 0: a layer each), `overlap=0|1`, `hybrid` or `shard=N`, `exchange=fp16|bf16`
// (16-bit shares of the reduce-scatter) or `exchange=powersgd:R[:W]` (stages 1 and 2).
// Later capabilities take keys of their kind (`exchange=` for compression) or a kind of
// their own, registered below.
#pragma once

#include "dtrain/dist/strategy/strategy.h"

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace dtrain::dist {

// A parsed spec: its items in a map, read through typed getters that remember which keys
// were read, so that the factory can refuse the ones no kind used.
class StrategySpec {
 public:
  // Throws naming the item when one is empty or a key appears twice.
  static StrategySpec parse(std::string_view text);

  const std::string& text() const { return text_; }
  bool has(const std::string& key) const { return items_.contains(key); }
  // A bare key reads as "".
  std::optional<std::string> text_of(const std::string& key);
  // An integer >= `min` (throws naming the key otherwise); `fallback` when absent or bare.
  int integer(const std::string& key, int fallback, int min = 1);
  // A number > 0 (or >= 0 with `zero_allowed`; throws naming the key otherwise); `fallback` when absent or bare.
  double number(const std::string& key, double fallback, bool zero_allowed = false);
  // A bare key, "1" or "true" is true; "0" or "false" false; absent: `fallback`.
  bool flag(const std::string& key, bool fallback = false);
  // Keys present but never read.
  std::vector<std::string> unread() const;

 private:
  std::string text_;
  std::map<std::string, std::string> items_;
  std::set<std::string> read_;
};

// What a kind may need besides the spec: the shape of one example, the global batch and the
// accumulation steps, from which a pipeline balanced by time (balance=time) builds its
// profiling micro-batch.
struct StrategyHints {
  Shape example_shape = {};
  std::int64_t batch_size = 0;
  int accumulate = 1;
  // The communicators' timeout: in async and ssp modes the parameter servers drop a worker
  // silent for half of it (PsOptions::lost_after) unless `lost=SECONDS` says otherwise. 0:
  // never.
  std::chrono::milliseconds timeout{0};
  // How tp=T splits the model (tensor_parallel/parallelize.h; the GPT's: gpt_plan.h);
  // required with tp > 1.
  std::optional<TensorParallelPlan> tensor_parallel_plan = {};
};

using StrategyFactory = std::function<std::shared_ptr<Strategy>(StrategySpec& spec, const CommunicatorPtr& world,
                                                                Device device, const StrategyHints& hints)>;

// Adds (or replaces) the kind `key`: a spec that names `key` builds it (above the built-in
// kinds). Thread-safe.
void register_strategy(const std::string& key, StrategyFactory factory);

std::shared_ptr<Strategy> make_strategy(std::string_view spec, const CommunicatorPtr& world, Device device,
                                        const StrategyHints& hints = {});

}  // namespace dtrain::dist
