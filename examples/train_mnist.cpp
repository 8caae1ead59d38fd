// train_mnist: trains an MLP or the LeNet-style CNN on MNIST-format data (Fashion-MNIST
// from Debian's dataset-fashion-mnist package by default) and reports test accuracy.
// Launched by mpirun it trains data-parallel: the global batch is split across ranks,
// each rank reads its own shard, gradients are averaged, evaluation is sharded. With
// --pipeline-stages K the model is cut into K stages on consecutive ranks, fed
// --micro-batches M per batch, and the ranks form K x (ranks / K) grid: the stages of
// each pipeline, and data-parallel replicas of each stage. With --strategy ps the last
// --num-ps ranks are parameter servers and the others workers (--ps-mode sync, async or
// ssp:K), or the roles come from a TF_CONFIG-style --cluster file / DTRAIN_CLUSTER.
//
//   build/examples/train_mnist --model cnn --epochs 3
//   mpirun -np 2 build/examples/train_mnist --model cnn --epochs 3
//   mpirun -np 8 build/examples/train_mnist --device cuda --precision bf16   # a GPU per rank, NCCL
//   # 2 stages x 2 data-parallel replicas:
//   mpirun -np 4 build/examples/train_mnist --model mlp --hidden 512,512,512,512 --pipeline-stages 2 --micro-batches 8
//   # 2 workers and 1 parameter server, asynchronous updates:
//   mpirun -np 3 build/examples/train_mnist --strategy ps --num-ps 1 --ps-mode async
//
// --precision bf16|f16 runs forward under autocast (16-bit products, f32 everything else;
// f16 with dynamic loss scaling); on the CPU the 16-bit products are emulated exactly.
//
// Errors (bad flags, missing or corrupt data) print one line and exit non-zero; under
// mpirun a failing rank ends the whole job with its message.
#include "common/example_support.h"
#include "dtrain/core/log.h"
#include "dtrain/core/parallel.h"
#include "dtrain/data/mnist.h"
#include "dtrain/data/subset.h"
#include "dtrain/dist/nccl.h"
#include "dtrain/dist/cluster_spec.h"
#include "dtrain/dist/pipeline_strategy.h"
#include "dtrain/dist/ps_strategy.h"
#include "dtrain/dist/strategy.h"
#include "dtrain/layers/models.h"
#include "dtrain/train/trainer.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

namespace {

using namespace dtrain;

const char* const kDebianFashionMnist = "/usr/share/datasets/fashion-mnist";

struct Config {
  std::string data = kDebianFashionMnist;
  std::string model = "cnn";
  std::vector<std::int64_t> hidden = {512, 512};  // the MLP's hidden widths
  int epochs = 3;
  std::int64_t batch_size = 64;  // global, per update: split across ranks and accumulation steps
  int accumulate = 1;
  double clip_grad_norm = 0;  // 0: off
  bool scale_lr = false;
  double lr = 0;  // 0: the model's default below
  std::string optimizer = "sgd";
  double momentum = 0.9;
  double weight_decay = 5e-4;
  std::string schedule = "cosine";
  double warmup_epochs = 0.2;
  std::uint64_t seed = 1;
  int threads = 0;  // 0: dtrain's default (cores / local ranks)
  std::string metrics;
  train::CheckpointOptions checkpoint;
  examples::ReportingFlags reporting;
  std::int64_t limit_train = 0;  // 0: all
  std::int64_t limit_test = 0;
  bool check_replicas = false;
  int evaluations_per_epoch = 1;
  double timeout_s = 300;
  double target_accuracy = 0;  // 0: train every epoch; else stop once test accuracy reaches it
  std::string device = "cpu";
  std::string precision = "fp32";
  int pipeline_stages = 1;  // 1: no pipeline
  int micro_batches = 4;
  std::string pipeline_schedule = "1f1b";
  int virtual_stages = 2;  // interleaved only
  std::vector<int> pipeline_cuts;
  std::string pipeline_balance = "params";
  bool recompute = false;
  std::string strategy = "auto";
  int num_ps = 0;  // 0: 1, or the cluster spec's
  std::string ps_mode = "async";
  std::string cluster;  // a cluster spec file
  int straggler_delay_ms = 0;
  int straggler_rank = 1;
};

void add_flags(CLI::App& app, Config& c) {
  app.add_option("--data", c.data, "directory with the MNIST IDX files (plain or .gz)")->capture_default_str();
  app.add_option("--model", c.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}))->capture_default_str();
  app.add_option("--hidden", c.hidden, "the MLP's hidden layer widths, comma-separated (e.g. 512,512,512,512)")
      ->delimiter(',')->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--epochs", c.epochs, "passes over the training set")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "global samples per optimizer update (split across ranks and --accumulate)")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--accumulate", c.accumulate,
                 "micro-batches per optimizer update (gradient accumulation; ranks communicate once per update)")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--clip-grad-norm", c.clip_grad_norm, "clip the gradients' global L2 norm to this (0: off)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--lr", c.lr, "peak learning rate (default: 0.05 for sgd, 0.001 for adam/adamw)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--scale-lr", c.scale_lr, "scale --lr linearly with the global batch size (base batch 64)");
  app.add_option("--optimizer", c.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))->capture_default_str();
  app.add_option("--momentum", c.momentum, "SGD momentum")->check(CLI::Range(0.0, 0.999))->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "L2 penalty (decoupled for adamw)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--schedule", c.schedule, "learning-rate schedule: cosine, step or constant")
      ->check(CLI::IsMember({"cosine", "step", "constant"}))->capture_default_str();
  app.add_option("--warmup-epochs", c.warmup_epochs, "linear warm-up length in epochs")
      ->check(CLI::Range(0.0, 100.0))->capture_default_str();
  app.add_option("--seed", c.seed, "seed for initialization and shuffling")->capture_default_str();
  app.add_option("--threads", c.threads, "intra-op threads (default: cores / local ranks)")->check(CLI::Range(1, 1024));
  app.add_option("--metrics", c.metrics, "write metrics as JSON lines to this file");
  examples::add_checkpoint_flags(app, c.checkpoint);
  examples::add_reporting_flags(app, c.reporting);
  app.add_option("--limit-train", c.limit_train, "train on the first N examples only")->check(CLI::PositiveNumber);
  app.add_option("--limit-test", c.limit_test, "evaluate on the first N test examples only")->check(CLI::PositiveNumber);
  app.add_option("--target-accuracy", c.target_accuracy,
                 "stop after the first epoch whose test accuracy (a fraction) reaches this; prints the time taken")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--evals-per-epoch", c.evaluations_per_epoch,
                 "evaluate (and check --target-accuracy) this many times per epoch, evenly spaced")
      ->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_flag("--check-replicas", c.check_replicas, "after each epoch, report the largest parameter difference across ranks");
  app.add_option("--device", c.device, "cpu, cuda (this rank's GPU: local rank mod device count) or cuda:N")
      ->capture_default_str();
  app.add_option("--precision", c.precision, "fp32, or bf16/f16 products under autocast (f16 with loss scaling)")
      ->check(CLI::IsMember({"fp32", "bf16", "f16"}))
      ->capture_default_str();
  app.add_option("--pipeline-stages", c.pipeline_stages,
                 "cut the model into this many stages on consecutive ranks (the rank count must be a multiple; "
                 "ranks / stages data-parallel replicas of each stage)")
      ->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--micro-batches", c.micro_batches, "pipeline: micro-batches per batch of each pipeline")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--pipeline-schedule", c.pipeline_schedule, "pipeline: gpipe, 1f1b or interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}))->capture_default_str();
  app.add_option("--virtual-stages", c.virtual_stages, "pipeline, interleaved schedule: model chunks per rank")
      ->check(CLI::Range(2, 64))->capture_default_str();
  app.add_option("--pipeline-cuts", c.pipeline_cuts,
                 "pipeline: layer indices where stages (chunks) begin, comma-separated (default: balanced)")
      ->delimiter(',');
  app.add_option("--pipeline-balance", c.pipeline_balance,
                 "pipeline, without --pipeline-cuts: balance stages by parameter count or by measured time")
      ->check(CLI::IsMember({"params", "time"}))->capture_default_str();
  app.add_flag("--recompute", c.recompute, "pipeline: keep only each stage's input, recompute its forward in backward");
  app.add_option("--strategy", c.strategy,
                 "auto (data parallel under mpirun; a pipeline with --pipeline-stages) or ps (parameter servers)")
      ->check(CLI::IsMember({"auto", "ps"}))->capture_default_str();
  app.add_option("--num-ps", c.num_ps, "ps: the number of server ranks (the last ones; default 1)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--ps-mode", c.ps_mode, "ps: sync, async or ssp:K (a worker waits when it would push a gradient more "
                 "than K updates stale)")->capture_default_str();
  app.add_option("--cluster", c.cluster, "ps: the roles as a TF_CONFIG-style JSON file {\"cluster\": {\"worker\": "
                 "[...], \"ps\": [...]}} (or the DTRAIN_CLUSTER variable)");
  app.add_option("--straggler-delay-ms", c.straggler_delay_ms,
                 "slow down one rank on purpose: it sleeps this long after each update (demonstrations, benchmarks)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--straggler-rank", c.straggler_rank, "the rank that --straggler-delay-ms slows")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--timeout", c.timeout_s, "seconds a collective may wait for the other ranks before the job is aborted")
      ->check(CLI::PositiveNumber)->capture_default_str();
}

std::shared_ptr<const data::Dataset> maybe_limit(std::shared_ptr<const data::Dataset> d, std::int64_t limit) {
  return limit > 0 ? data::Subset::first(std::move(d), limit) : std::move(d);
}

int run(Config c, const dist::CommunicatorPtr& comm) {
  logging::init(comm->rank(), comm->size());
  if (c.threads > 0) set_num_threads(c.threads);
  manual_seed(c.seed);  // same initial model everywhere; DataParallel also broadcasts rank 0's
  if (c.scale_lr) c.lr = optim::linear_scaled_lr(c.lr, c.batch_size, 64);
  DTRAIN_CHECK(std::filesystem::is_directory(c.data),
               "--data '{}': not a directory (expected the MNIST IDX files; Debian's dataset-fashion-mnist "
               "package installs them in {})",
               c.data, kDebianFashionMnist);
  auto train_set = maybe_limit(data::MnistDataset::load(c.data, data::MnistDataset::Split::Train), c.limit_train);
  auto test_set = maybe_limit(data::MnistDataset::load(c.data, data::MnistDataset::Split::Test), c.limit_test);

  const Device device = c.device == "cuda" ? dist::rank_cuda_device() : Device::parse(c.device);
  const std::optional<DType> autocast = examples::autocast_type(c.precision);
  std::shared_ptr<dist::Strategy> strategy;
  std::shared_ptr<dist::PipelineStrategy> pipeline;
  std::optional<dist::PsOptions> ps;
  const char* cluster_env = std::getenv("DTRAIN_CLUSTER");
  if (c.strategy == "ps" || !c.cluster.empty() || cluster_env) {
    DTRAIN_CHECK(c.pipeline_stages == 1, "--strategy ps: parameter servers and --pipeline-stages do not combine");
    ps.emplace();
    dist::parse_ps_mode(c.ps_mode, *ps);
    ps->servers = c.num_ps > 0 ? c.num_ps : 1;
    if (!c.cluster.empty() || cluster_env) {
      const std::string source = c.cluster.empty() ? std::string("DTRAIN_CLUSTER") : "--cluster '" + c.cluster + "'";
      const dist::ClusterSpec spec = c.cluster.empty() ? dist::parse_cluster_spec(cluster_env, source, comm->size())
                                                       : dist::read_cluster_spec(c.cluster, comm->size());
      DTRAIN_CHECK(c.num_ps == 0 || c.num_ps == static_cast<int>(spec.ps.size()),
                   "--num-ps {} contradicts {}, which lists {} ps", c.num_ps, source, spec.ps.size());
      dist::check_cluster_hosts(spec, source, *comm);
      ps->servers = static_cast<int>(spec.ps.size());
    }
    DTRAIN_CHECK(comm->size() > ps->servers,
                 "--strategy ps: {} server(s) need at least one worker besides: launch with mpirun -np {} or more",
                 ps->servers, ps->servers + 1);
    strategy = std::make_shared<dist::ParameterServerStrategy>(comm, device, *ps);
  } else if (c.pipeline_stages > 1) {
    const auto schedule = dist::parse_schedule(c.pipeline_schedule);
    dist::PipelineOptions options{
        .stages = c.pipeline_stages,
        .micro_batches = c.micro_batches,
        .schedule = schedule,
        .virtual_stages = schedule == dist::PipelineSchedule::Interleaved ? c.virtual_stages : 1,
        .cuts = c.pipeline_cuts,
        .balance = c.pipeline_balance == "time" ? dist::PipelineOptions::Balance::Time
                                                : dist::PipelineOptions::Balance::Parameters,
        .recompute = c.recompute};
    if (options.balance == dist::PipelineOptions::Balance::Time) {
      // Timed on one micro-batch of the shape training will use.
      const std::int64_t replicas = std::max(comm->size() / c.pipeline_stages, 1);
      const std::int64_t rows = std::max<std::int64_t>(c.batch_size / replicas / c.accumulate / c.micro_batches, 1);
      options.profile_input = Tensor::zeros({rows, 1, 28, 28});
    }
    pipeline = std::make_shared<dist::PipelineStrategy>(comm, device, options);
    strategy = pipeline;
  } else {
    strategy = dist::default_strategy(comm, device);  // data-parallel under mpirun (NCCL on GPUs)
  }
  std::shared_ptr<nn::Module> whole = c.model == "mlp" ? nn::mlp(28 * 28, c.hidden, 10) : nn::lenet_cnn(1, 10);
  const std::int64_t parameters = whole->num_parameters();
  auto model = strategy->prepare(std::move(whole));  // a pipeline keeps this rank's stage
  auto optimizer = examples::make_optimizer(
      {.name = c.optimizer, .lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay}, model->parameters());
  train::Trainer trainer(strategy, {.train = train_set, .test = test_set, .batch_size = c.batch_size, .seed = c.seed},
                         {.epochs = c.epochs,
                          .accumulate = c.accumulate,
                          .clip_grad_norm = c.clip_grad_norm,
                          .autocast = autocast,
                          .loss_scaler = {.enabled = c.precision == "f16"},  // bf16 has f32's range
                          .target_accuracy = c.target_accuracy,
                          .evaluations_per_epoch = c.evaluations_per_epoch,
                          .check_replicas = c.check_replicas,
                          .metrics = c.metrics,
                          .checkpoint = c.checkpoint,
                          .progress = c.reporting.progress,
                          .trace = c.reporting.trace,
                          .tensorboard = c.reporting.tensorboard});
  auto schedule = examples::make_schedule(
      {.name = c.schedule, .lr = c.lr, .warmup_epochs = c.warmup_epochs, .epochs = c.epochs}, trainer.updates_per_epoch());
  if (strategy->reports()) {
    fmt::print("train_mnist: {} ({} parameters), {} train / {} test examples from {}, {} rank(s) x {} thread(s), "
               "global batch {}{}, {} lr {:g}, on {}{}\n",
               c.model, parameters, train_set->size(), test_set->size(), c.data, comm->size(),
               num_threads(), c.batch_size,
               c.accumulate > 1 ? fmt::format(" ({} micro-batches of {} per rank)", c.accumulate,
                                              trainer.micro_batch_size())
                                : "",
               c.optimizer, c.lr, device.is_cuda() ? "cuda" : "cpu", autocast ? ", " + c.precision + " autocast" : "");
    if (ps) {
      fmt::print("parameter servers: {} worker(s) (ranks 0-{}), {} server(s) (ranks {}-{}), mode {}\n",
                 comm->size() - ps->servers, comm->size() - ps->servers - 1, ps->servers, comm->size() - ps->servers,
                 comm->size() - 1, dist::ps_mode_name(*ps));
    }
    if (pipeline) {
      fmt::print("pipeline: {} stages x {} replica(s), {} micro-batches per batch, schedule {}{}, cut at layers [{}]{}; "
                 "this stage (the last) holds {} parameters\n",
                 c.pipeline_stages, pipeline->replicas(), c.micro_batches, c.pipeline_schedule,
                 c.pipeline_schedule == "interleaved" ? fmt::format(" ({} chunks per rank)", c.virtual_stages) : "",
                 fmt::join(pipeline->cuts(), ", "), c.recompute ? ", recomputing activations" : "",
                 model->num_parameters());
    }
    std::fflush(stdout);
  }
  if (c.straggler_delay_ms > 0 && comm->rank() == c.straggler_rank) {
    trainer.on_step_end([ms = c.straggler_delay_ms](const train::StepEvent&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    });
  }
  trainer.fit(*optimizer, schedule.get());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train an MLP or CNN on MNIST-format data (Fashion-MNIST by default); data-parallel under mpirun",
               "train_mnist"};
  Config config;
  add_flags(app, config);
  CLI11_PARSE(app, argc, argv);
  if (config.lr == 0) config.lr = config.optimizer == "sgd" ? 0.05 : 1e-3;
  return examples::run_example("train_mnist", config.timeout_s,
                               [&](const dist::CommunicatorPtr& comm) { return run(config, comm); });
}
