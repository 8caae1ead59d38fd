#include "common/parallel_flags.h"

#include "dtrain/core/error.h"
#include "dtrain/dist/strategy/cluster_spec.h"
#include "dtrain/dist/data_parallel/data_parallel_strategy.h"
#include "dtrain/dist/pipeline/pipeline_strategy.h"
#include "dtrain/dist/ps/ps_strategy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>

namespace dtrain::examples {

void add_parallel_flags(CLI::App& app, ParallelFlags& p) {
  app.add_option("--parallel", p.spec,
                 "how the job is distributed, e.g. dp, pp=2,micro=8,schedule=1f1b, pp=2,dp=2, ps=1,mode=async, zero=1 "
                 "(keys: dtrain/dist/strategy/strategy_factory.h; default: data parallel under mpirun)");
  app.add_option("--pipeline-stages", p.pipeline_stages,
                 "alias of pp=K: cut the model into K stages on consecutive "
                 "ranks (ranks / K data-parallel replicas of each stage; 1: no pipeline)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--micro-batches", p.micro_batches, "alias of micro=M: pipeline micro-batches per batch (default 4)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--pipeline-schedule", p.pipeline_schedule,
                 "alias of schedule=: gpipe, 1f1b (default), interleaved, zb-h1 or zb-v")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"}));
  app.add_option("--virtual-stages", p.virtual_stages, "alias of virtual=V: interleaved chunks per rank (default 2)")
      ->check(CLI::Range(2, 64));
  app.add_option("--pipeline-cuts", p.pipeline_cuts,
                 "alias of cuts=A:B: layer indices where stages (chunks) begin, comma-separated (default: balanced)")
      ->delimiter(',');
  app.add_option("--pipeline-balance", p.pipeline_balance, "alias of balance=: params (default) or time")
      ->check(CLI::IsMember({"params", "time"}));
  app.add_flag("--recompute", p.recompute, "alias of recompute: keep only each stage's input, recompute its forward");
  app.add_option("--recompute-stages", p.recompute_stages,
                 "alias of recompute_stages=A:B: recompute on these stages alone, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--strategy", p.strategy, "alias: ps is --parallel ps (parameter servers); auto follows --parallel")
      ->check(CLI::IsMember({"auto", "ps"}))
      ->capture_default_str();
  app.add_option("--num-ps", p.num_ps, "alias of ps=S: the number of server ranks (the last ones; default 1)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--ps-mode", p.ps_mode,
                 "alias of mode=: sync, async (default) or ssp:K (a worker waits when it would "
                 "push a gradient more than K updates stale)");
  app.add_option("--backup-workers", p.backup_workers,
                 "alias of backup=B: with --ps-mode sync, each update takes the first workers - B gradients "
                 "and drops the late ones (a straggler stops setting the pace)")
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--grad-compression", p.grad_compression,
                 "alias of exchange=: none (default), fp16, bf16 or powersgd:R[:W] (rank R, W plain steps first; "
                 "dtrain/dist/data_parallel/gradient_exchange.h): what data-parallel gradients go over the wire as");
  app.add_option("--cluster", p.cluster,
                 "parameter-server roles as a TF_CONFIG-style JSON file {\"cluster\": "
                 "{\"worker\": [...], \"ps\": [...]}} (or the DTRAIN_CLUSTER variable): sets ps=<its ps tasks>");
}

std::string parallel_spec(const ParallelFlags& p, dist::Communicator& world) {
  std::vector<std::string> items;
  if (!p.spec.empty()) items.push_back(p.spec);
  if (p.pipeline_stages && *p.pipeline_stages > 1) items.push_back(fmt::format("pp={}", *p.pipeline_stages));
  if (p.micro_batches) items.push_back(fmt::format("micro={}", *p.micro_batches));
  if (p.pipeline_schedule) items.push_back("schedule=" + *p.pipeline_schedule);
  if (p.virtual_stages) items.push_back(fmt::format("virtual={}", *p.virtual_stages));
  if (!p.pipeline_cuts.empty()) items.push_back(fmt::format("cuts={}", fmt::join(p.pipeline_cuts, ":")));
  if (p.pipeline_balance) items.push_back("balance=" + *p.pipeline_balance);
  if (p.recompute) items.push_back("recompute");
  if (!p.recompute_stages.empty()) {
    items.push_back(fmt::format("recompute_stages={}", fmt::join(p.recompute_stages, ":")));
  }
  if (p.grad_compression && *p.grad_compression != "none") items.push_back("exchange=" + *p.grad_compression);
  if (p.ps_mode) items.push_back("mode=" + *p.ps_mode);
  if (p.backup_workers) items.push_back(fmt::format("backup={}", *p.backup_workers));
  const char* cluster_env = std::getenv("DTRAIN_CLUSTER");
  std::optional<int> servers = p.num_ps;
  if (!p.cluster.empty() || cluster_env) {
    const std::string source = p.cluster.empty() ? std::string("DTRAIN_CLUSTER") : "--cluster '" + p.cluster + "'";
    const dist::ClusterSpec spec = p.cluster.empty() ? dist::parse_cluster_spec(cluster_env, source, world.size())
                                                     : dist::read_cluster_spec(p.cluster, world.size());
    DTRAIN_CHECK(!p.num_ps || *p.num_ps == static_cast<int>(spec.ps.size()),
                 "--num-ps {} contradicts {}, which lists "
                 "{} ps",
                 *p.num_ps, source, spec.ps.size());
    dist::check_cluster_hosts(spec, source, world);
    servers = static_cast<int>(spec.ps.size());
  }
  if (servers) items.push_back(fmt::format("ps={}", *servers));
  else if (p.strategy == "ps") items.push_back("ps");
  // --grad-compression alone compresses the default, data parallelism.
  const bool names_kind =
      !p.spec.empty() || (p.pipeline_stages && *p.pipeline_stages > 1) || servers || p.strategy == "ps";
  if (p.grad_compression && *p.grad_compression != "none" && !names_kind) items.insert(items.begin(), "dp");
  return fmt::format("{}", fmt::join(items, ","));
}

std::shared_ptr<dist::Strategy> make_strategy(const ParallelFlags& p, const dist::CommunicatorPtr& world, Device device,
                                              const dist::StrategyHints& hints) {
  return dist::make_strategy(parallel_spec(p, *world), world, device, hints);
}

namespace {
std::string describe_layout_of_kind(const dist::Strategy& strategy, int world_size);
}  // namespace

std::string describe_layout(const dist::Strategy& strategy, int world_size) {
  std::string layout = describe_layout_of_kind(strategy, world_size);
  if (const dist::TensorParallel* tp = strategy.tensor_parallel()) {
    if (!layout.empty()) layout += "\n";
    layout += fmt::format("tensor parallel: {} ranks per layer{}; this rank holds {} parameters", tp->group()->size(),
                          tp->sequence_parallel() ? ", sequence parallel" : "", strategy.module().num_parameters());
  }
  return layout;
}

namespace {
std::string describe_layout_of_kind(const dist::Strategy& strategy, int world_size) {
  if (const auto* ps = dynamic_cast<const dist::ParameterServerStrategy*>(&strategy)) {
    const int workers = ps->mesh().role_size("worker"), servers = ps->mesh().role_size("ps");
    const dist::PsOptions& o = ps->options();
    std::string extras;
    if (o.backup_workers > 0) extras += fmt::format(", {} backup worker(s)", o.backup_workers);
    if (o.staleness_lr) extras += ", learning rate / staleness";
    if (o.delay_compensation > 0) extras += fmt::format(", delay compensation {:g}", o.delay_compensation);
    if (o.lost_after.count() > 0) {
      extras += fmt::format(", a worker silent {:g} s is dropped", std::chrono::duration<double>(o.lost_after).count());
    }
    return fmt::format("parameter servers: {} worker(s) (ranks 0-{}), {} server(s) (ranks {}-{}), mode {}{}", workers,
                       workers - 1, servers, workers, world_size - 1, dist::ps_mode_name(o), extras);
  }
  if (const auto* pipeline = dynamic_cast<const dist::PipelineStrategy*>(&strategy)) {
    const dist::PipelineOptions& o = pipeline->options();
    const bool interleaved = o.virtual_stages > 1;
    return fmt::format(
        "pipeline: {} stages x {} replica(s), {} micro-batches per batch, schedule {}{}, cut at layers "
        "[{}]{}; this stage (the loss's) holds {} parameters",
        o.stages, pipeline->replicas(), o.micro_batches, dist::schedule_name(o.schedule),
        interleaved ? fmt::format(" ({} chunks per rank)", o.virtual_stages) : "", fmt::join(pipeline->cuts(), ", "),
        o.recompute                  ? ", recomputing activations"
        : o.recompute_stages.empty() ? ""
                                     : fmt::format(", recomputing on stages {}", fmt::join(o.recompute_stages, ",")),
        pipeline->module().num_parameters());
  }
  if (const auto* dp = dynamic_cast<const dist::DataParallelStrategy*>(&strategy)) {
    const std::string& exchange = dp->options().data_parallel.gradient_exchange;
    if (exchange != "all_reduce")
      return fmt::format("data parallel: {} replicas, gradient exchange {}", dp->data_shard().count, exchange);
  }
  return "";
}
}  // namespace

}  // namespace dtrain::examples
