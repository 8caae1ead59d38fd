#include "common/example_support.h"

#include "dtrain/core/error.h"
#include "dtrain/comm/nccl.h"
#include "dtrain/dist/ps/ps_strategy.h"
#include "dtrain/optim/adam.h"
#include "dtrain/optim/lamb.h"
#include "dtrain/optim/lars.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/tensor/cpu_kernels.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>

namespace dtrain::examples {

double resolved_momentum(const OptimizerFlags& f, const dist::Strategy& strategy, std::string& note) {
  constexpr double kMomentum = 0.9;
  note.clear();
  if (f.momentum) return *f.momentum;
  const auto* ps = dynamic_cast<const dist::ParameterServerStrategy*>(&strategy);
  if (ps == nullptr || ps->options().mode == dist::PsMode::Sync) return kMomentum;
  const int workers = ps->mesh().role_size("worker");
  const double momentum = dist::asynchronous_momentum(kMomentum, ps->options(), workers);
  note = fmt::format(", momentum {:g} ({:g} less the implicit momentum of {} {} worker(s); --momentum sets it)",
                     momentum, kMomentum, workers, dist::ps_mode_name(ps->options()));
  return momentum;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerConfig& c, std::vector<Variable> params) {
  if (c.name == "sgd") {
    return std::make_unique<optim::SGD>(std::move(params),
                                        optim::SgdOptions{.lr = c.lr,
                                                          .momentum = c.momentum,
                                                          .weight_decay = c.weight_decay,
                                                          .nesterov = c.momentum > 0,
                                                          .exclude_1d_from_weight_decay = c.exclude_1d});
  }
  if (c.name == "lars") {
    return std::make_unique<optim::LARS>(
        std::move(params),
        optim::LarsOptions{
            .lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay, .exclude_1d = c.exclude_1d});
  }
  if (c.name == "lamb") {
    return std::make_unique<optim::LAMB>(
        std::move(params), optim::LambOptions{.lr = c.lr, .weight_decay = c.weight_decay, .exclude_1d = c.exclude_1d});
  }
  optim::AdamOptions o{.lr = c.lr, .weight_decay = c.weight_decay, .exclude_1d_from_weight_decay = c.exclude_1d};
  if (c.name == "adamw") return std::make_unique<optim::AdamW>(std::move(params), o);
  DTRAIN_CHECK(c.name == "adam", "--optimizer {}: expected sgd, adam, adamw, lars or lamb", c.name);
  return std::make_unique<optim::Adam>(std::move(params), o);
}

std::shared_ptr<const optim::LrSchedule> make_schedule(const ScheduleConfig& c, std::int64_t updates_per_epoch) {
  const std::int64_t total = updates_per_epoch * c.epochs;
  const auto warmup = static_cast<std::int64_t>(c.warmup_epochs * static_cast<double>(updates_per_epoch));
  std::shared_ptr<const optim::LrSchedule> main;
  if (c.name == "cosine") main = std::make_shared<optim::CosineLr>(c.lr, std::max<std::int64_t>(total - warmup, 1));
  else if (c.name == "step") main = std::make_shared<optim::StepLr>(c.lr, std::max<std::int64_t>(total / 3, 1), 0.1);
  else main = std::make_shared<optim::ConstantLr>(c.lr);
  if (warmup == 0) return main;
  return std::make_shared<optim::WarmupLr>(main, warmup, 0.1);
}

void add_optimizer_flags(CLI::App& app, OptimizerFlags& f, const std::vector<std::string>& optimizers,
                         const std::string& lr_defaults, const std::string& weight_decay_defaults, bool schedule_flag) {
  app.add_option("--optimizer", f.optimizer, fmt::format("{}", fmt::join(optimizers, ", ")))
      ->check(CLI::IsMember(optimizers))
      ->capture_default_str();
  auto* lr =
      app.add_option("--lr", f.lr, "peak learning rate, as used (" + lr_defaults + ")")->check(CLI::PositiveNumber);
  app.add_option("--lr-per-256", f.lr_per_256,
                 "peak learning rate per 256 samples, scaled linearly with --batch-size (instead of --lr)")
      ->check(CLI::PositiveNumber)
      ->excludes(lr);
  app.add_option("--momentum", f.momentum,
                 "SGD (Nesterov) and LARS momentum (default: 0.9; with asynchronous parameter servers 0.9 less the "
                 "workers' implicit momentum: 0.8 for 2 workers, 0.7 for 3)")
      ->check(CLI::Range(0.0, 0.999));
  app.add_option("--weight-decay", f.weight_decay, "weight decay (decoupled for adamw; " + weight_decay_defaults + ")")
      ->check(CLI::Range(0.0, 1.0));
  if (schedule_flag) {
    app.add_option("--schedule", f.schedule, "learning-rate schedule after the warm-up: cosine, step or constant")
        ->check(CLI::IsMember({"cosine", "step", "constant"}))
        ->capture_default_str();
  }
  app.add_option("--warmup-epochs", f.warmup_epochs, "linear warm-up length in epochs")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
}

double peak_lr(const OptimizerFlags& f, std::int64_t global_batch, double fallback) {
  if (f.lr) return *f.lr;
  if (f.lr_per_256) return optim::linear_scaled_lr(*f.lr_per_256, global_batch, 256);
  return fallback;
}

namespace {

void add_checkpoint_flags(CLI::App& app, train::CheckpointOptions& c) {
  app.add_option("--checkpoint-dir", c.dir,
                 "save checkpoints here, at the end of each epoch (and see --checkpoint-every)");
  app.add_option("--checkpoint-every", c.every, "also save every N updates (0: at epoch ends only)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--keep", c.keep, "keep the newest K checkpoints (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option(
      "--resume", c.resume,
      "continue from a checkpoint: auto (the latest in --checkpoint-dir, or start afresh when there is none) "
      "or a checkpoint directory");
  app.add_flag("!--sync-checkpoint", c.async, "write checkpoints before training goes on (default: in the background)");
}

void add_reporting_flags(CLI::App& app, RunFlags::Reporting& r) {
  const std::map<std::string, train::ProgressMode> modes{{"auto", train::ProgressMode::Auto},
                                                         {"bar", train::ProgressMode::Bar},
                                                         {"lines", train::ProgressMode::Lines},
                                                         {"none", train::ProgressMode::None}};
  app.add_option("--progress", r.progress,
                 "auto (a bar on a terminal, lines when the output goes to a file, under mpirun too), bar, lines or "
                 "none")
      ->transform(CLI::CheckedTransformer(modes))
      ->default_str("auto");
  app.add_option("--trace", r.trace.file,
                 "write a timeline of the --trace-steps updates of every rank to this file (Chrome trace-event JSON: "
                 "open it in https://ui.perfetto.dev)");
  app.add_option_function<std::string>(
         "--trace-steps", [&r](const std::string& text) { train::parse_trace_steps(text, r.trace); },
         "the global updates the timeline covers, A-B or A (from 1)")
      ->check(CLI::Validator(
          [](std::string& text) {
            try {
              train::TraceOptions probe;
              train::parse_trace_steps(text, probe);
              return std::string();
            } catch (const std::exception& e) {
              return std::string(e.what());
            }
          },
          "A-B"))
      ->default_str("1-5");
  app.add_option("--sample-log", r.sample_log,
                 "record each applied update's sample indices here, a file per rank and attempt (audit them with "
                 "tools/check_sample_log.py)");
  app.add_option("--tensorboard", r.tensorboard,
                 "write TensorBoard event files here (loss, accuracy, learning rate, samples/s, exposed "
                 "communication share; staleness for parameter servers)");
}

// What happens when the loss diverges (dtrain/train/guard.h).
void add_guard_flags(CLI::App& app, train::GuardOptions& g) {
  app.add_flag("!--no-rollback", g.rollback,
               "end the run when the loss diverges (non-finite, or a spike) instead of rolling back to the last "
               "good in-memory snapshot and skipping the batches since");
  app.add_option("--spike-factor", g.spike_factor,
                 "a loss above this many times the running median of the last 10 checks (every 10th update) is a "
                 "spike (0: no spike check)")
      ->capture_default_str();  // the range is the Trainer's to check (train::check_guard_options)
  app.add_option("--snapshot-every", g.snapshot_every, "updates between the in-memory snapshots rollback returns to")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--max-rollbacks", g.max_rollbacks, "rollbacks allowed; divergence after them ends the run")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--rollback-lr-factor", g.lr_factor,
                 "the learning rate's factor for --rollback-cooldown updates after a rollback (1: unchanged)")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  app.add_option("--rollback-cooldown", g.cooldown, "updates at the lowered learning rate after a rollback")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--stall-updates", g.stall_updates,
                 "report a loss that stays at its starting level, or grows, for this many updates (0: never)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))
      ->capture_default_str();
}

}  // namespace

void add_run_flags(CLI::App& app, RunFlags& r, const std::string& seed_use) {
  app.add_option("--epochs", r.epochs, "passes over the training set")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--batch-size", r.batch_size,
                 "global samples per optimizer update (split across ranks and --accumulate)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  auto* accumulate =
      app.add_option("--accumulate", r.accumulate,
                     "micro-batches per optimizer update (gradient accumulation; ranks communicate once per update)")
          ->check(CLI::Range(1, 1 << 16))
          ->capture_default_str();
  app.add_option("--micro-batch-size", r.micro_batch,
                 "samples per micro-batch on each rank, the accumulation derived from --batch-size and the number of "
                 "ranks (an elastic job relaunched on fewer ranks then accumulates more instead of growing its "
                 "micro-batches)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))
      ->excludes(accumulate);
  app.add_option("--clip-grad-norm", r.clip_grad_norm, "clip the gradients' global L2 norm to this (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--target-accuracy", r.target_accuracy,
                 "stop after the first evaluation whose test accuracy (a fraction) reaches this; prints the time taken")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--evals-per-epoch", r.evaluations_per_epoch,
                 "evaluate (and check --target-accuracy) this many times per epoch, evenly spaced")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  add_job_flags(app, r, seed_use);
}

void add_job_flags(CLI::App& app, RunFlags& r, const std::string& seed_use) {
  app.add_option("--device", r.device, "cpu, cuda (this rank's GPU: local rank mod device count) or cuda:N")
      ->capture_default_str();
  app.add_option("--precision", r.precision, "fp32, or bf16/f16 products under autocast (f16 with loss scaling)")
      ->check(CLI::IsMember({"fp32", "bf16", "f16"}))
      ->capture_default_str();
  app.add_option("--seed", r.seed, "seed for " + seed_use)->capture_default_str();
  app.add_option("--threads", r.threads, "intra-op threads (default: cores / local ranks)")->check(CLI::Range(1, 1024));
  app.add_option("--metrics", r.metrics, "write metrics as JSON lines to this file");
  app.add_option("--timeout", r.timeout_s,
                 "seconds a collective may wait for the other ranks before the job is aborted")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_checkpoint_flags(app, r.checkpoint);
  add_reporting_flags(app, r.reporting);
  add_guard_flags(app, r.guard);
}

Device run_device(const RunFlags& r) { return r.device == "cuda" ? dist::rank_cuda_device() : Device::parse(r.device); }

train::TrainerOptions trainer_options(const RunFlags& r) {
  return {.epochs = r.epochs,
          .accumulate = r.accumulate,
          .micro_batch = r.micro_batch,
          .clip_grad_norm = r.clip_grad_norm,
          .autocast = autocast_type(r.precision),
          .loss_scaler = {.enabled = r.precision == "f16"},  // bf16 has f32's range
          .target_accuracy = r.target_accuracy,
          .evaluations_per_epoch = r.evaluations_per_epoch,
          .metrics = r.metrics,
          .checkpoint = r.checkpoint,
          .progress = r.reporting.progress,
          .trace = r.reporting.trace,
          .tensorboard = r.reporting.tensorboard,
          .guard = r.guard,
          .sample_log = r.reporting.sample_log};
}

std::optional<DType> autocast_type(const std::string& precision) {
  if (precision == "bf16") return DType::bf16;
  if (precision == "f16") return DType::f16;
  return std::nullopt;
}

std::string autocast_description(const std::string& precision, const Device& device) {
  if (!autocast_type(precision)) return "";
  std::string text = ", " + precision + " autocast";
  if (precision == "bf16" && !device.is_cuda()) {
    text += cpu_native_bf16() ? " (products on oneDNN's bf16 kernels)" : " (products emulated in f32)";
  }
  return text;
}

int run_example(const char* program, double timeout_s, const std::function<int(const dist::CommunicatorPtr&)>& body) {
  return dist::run_program(program, body,
                           {.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000))});
}

}  // namespace dtrain::examples
