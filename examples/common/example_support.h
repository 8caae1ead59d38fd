// What the example trainers (train_mnist, train_imagenet) share: the optimizer and
// learning-rate schedule their flags describe, the precision flag, and the main() that
// turns an error into one line and a non-zero exit.
#pragma once

#include "dtrain/comm/communicator.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/tensor/dtype.h"
#include "dtrain/train/checkpointer.h"
#include "dtrain/train/trainer.h"

#include <CLI/CLI.hpp>

#include <filesystem>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::examples {

// What every trainer's run takes: its length and batch, the device and precision, the
// seed, threads, where metrics go, when to stop, the collectives' timeout, checkpoints and
// how progress shows, and what happens when the loss diverges. The program sets its
// defaults before add_run_flags.
struct RunFlags {
  int epochs = 1;
  std::int64_t batch_size = 64;  // global, per update: split across ranks and accumulation steps
  int accumulate = 1;
  std::int64_t micro_batch = 0;  // 0: batch / (ranks x accumulate)
  double clip_grad_norm = 0;     // 0: off
  std::string device = "cpu";
  std::string precision = "fp32";
  std::uint64_t seed = 1;
  int threads = 0;  // 0: dtrain's default (cores / local ranks)
  std::string metrics{};
  double target_accuracy = 0;  // 0: every epoch; else stop once test accuracy reaches it
  int evaluations_per_epoch = 1;
  double timeout_s = 300;
  train::CheckpointOptions checkpoint{};
  struct Reporting {
    train::ProgressMode progress = train::ProgressMode::Auto;
    train::TraceOptions trace = {};
    std::filesystem::path tensorboard = {};
    std::filesystem::path sample_log = {};
  } reporting{};
  train::GuardOptions guard{};  // --no-rollback, --spike-factor, --snapshot-every, ...
};
// `seed_use`: what the seed decides ("initialization and shuffling").
void add_run_flags(CLI::App& app, RunFlags& r, const std::string& seed_use);
// The same without the epoch-based ones (epochs, batch size, accumulation, clipping, target
// accuracy, evaluations per epoch), for a trainer that counts steps (train_gpt).
void add_job_flags(CLI::App& app, RunFlags& r, const std::string& seed_use);
// The device the flags name (cuda: this rank's GPU, local rank mod device count).
Device run_device(const RunFlags& r);
// The Trainer's options the flags describe (epochs, accumulation, clipping, precision with
// loss scaling for f16, target, evaluations, metrics, checkpoints, progress, trace,
// TensorBoard); the program adds its own.
train::TrainerOptions trainer_options(const RunFlags& r);

// The optimizer and learning-rate flags both trainers take, with one meaning of --lr: the
// peak learning rate as used. --lr-per-256 gives it per 256 samples instead, scaled
// linearly with the global batch (the linear scaling rule of large-batch training).
struct OptimizerFlags {
  std::string optimizer = "sgd";
  std::optional<double> lr{}, lr_per_256{};
  // Unset: 0.9, less the implicit momentum of asynchronous parameter-server workers
  // (resolved_momentum).
  std::optional<double> momentum{};
  std::optional<double> weight_decay{};  // unset: the program's default
  std::string schedule = "cosine";       // cosine, step or constant
  double warmup_epochs = 0;
};
// `optimizers`: the names the program offers; `lr_defaults` and `weight_decay_defaults`: what
// the help says of the default learning rates and weight decay.
void add_optimizer_flags(CLI::App& app, OptimizerFlags& f, const std::vector<std::string>& optimizers,
                         const std::string& lr_defaults, const std::string& weight_decay_defaults, bool schedule_flag);
// The peak learning rate for `global_batch` samples per update: --lr, or --lr-per-256
// scaled, or else `fallback` (the program's default).
double peak_lr(const OptimizerFlags& f, std::int64_t global_batch, double fallback);

// The momentum the flags mean under `strategy`: --momentum as given, or else 0.9, which
// under asynchronous parameter servers (async, ssp) becomes dist::asynchronous_momentum's
// share of it. `note`: for the layout line, what was chosen and why ("" when nothing was).
double resolved_momentum(const OptimizerFlags& f, const dist::Strategy& strategy, std::string& note);

struct OptimizerConfig {
  std::string name = "sgd";  // sgd, adam, adamw, lars or lamb
  double lr = 0.05;
  double momentum = 0.9;  // sgd (Nesterov when > 0) and lars
  double weight_decay = 5e-4;
  // Parameters with fewer than 2 dimensions (biases, batch-norm scales and shifts) get no
  // weight decay (lars and lamb: no trust ratio either).
  bool exclude_1d = false;
};
std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerConfig& c, std::vector<Variable> params);

struct ScheduleConfig {
  std::string name = "cosine";  // cosine, step (x0.1 at each third) or constant
  double lr = 0.05;             // the peak
  double warmup_epochs = 0;     // linear warm-up from a tenth of lr
  int epochs = 1;
};
std::shared_ptr<const optim::LrSchedule> make_schedule(const ScheduleConfig& c, std::int64_t updates_per_epoch);

// "fp32" -> none, "bf16" / "f16" -> the autocast type.
std::optional<DType> autocast_type(const std::string& precision);
// For a trainer's first line: "" for fp32, else ", bf16 autocast" and, on the CPU, how bf16
// products run there (cpu_native_bf16(): on oneDNN's bf16 kernels, or emulated in f32).
std::string autocast_description(const std::string& precision, const Device& device);

// Runs body(world communicator) and returns its exit code. An error (dtrain's or any
// std::exception) prints "<program>: error: <message>" and returns 1; under mpirun it ends
// the whole job instead, so that no rank waits in a collective for a rank that is gone.
int run_example(const char* program, double timeout_s, const std::function<int(const dist::CommunicatorPtr&)>& body);

}  // namespace dtrain::examples
