// What the example trainers (train_mnist, train_imagenet) share: the optimizer and
// learning-rate schedule their flags describe, the precision flag, and the main() that
// turns an error into one line and a non-zero exit.
#pragma once

#include "dtrain/dist/communicator.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/tensor/dtype.h"
#include "dtrain/train/checkpointer.h"
#include "dtrain/train/trainer.h"

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::examples {

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

// --checkpoint-dir, --checkpoint-every, --keep, --resume and --sync-checkpoint, into `c`.
void add_checkpoint_flags(CLI::App& app, train::CheckpointOptions& c);

// How a run shows itself: --progress, --trace FILE, --trace-steps A-B and --tensorboard DIR.
struct ReportingFlags {
  train::ProgressMode progress = train::ProgressMode::Auto;
  train::TraceOptions trace = {};
  std::filesystem::path tensorboard = {};
};
void add_reporting_flags(CLI::App& app, ReportingFlags& r);

// "fp32" -> none, "bf16" / "f16" -> the autocast type.
std::optional<DType> autocast_type(const std::string& precision);

// Runs body(world communicator) and returns its exit code. An error (dtrain's or any
// std::exception) prints "<program>: error: <message>" and returns 1; under mpirun it ends
// the whole job instead, so that no rank waits in a collective for a rank that is gone.
int run_example(const char* program, double timeout_s, const std::function<int(const dist::CommunicatorPtr&)>& body);

}  // namespace dtrain::examples
