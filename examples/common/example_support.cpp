#include "common/example_support.h"

#include "dtrain/core/error.h"
#include "dtrain/optim/adam.h"
#include "dtrain/optim/lamb.h"
#include "dtrain/optim/lars.h"
#include "dtrain/optim/sgd.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

namespace dtrain::examples {

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
        optim::LarsOptions{.lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay, .exclude_1d = c.exclude_1d});
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

void add_checkpoint_flags(CLI::App& app, train::CheckpointOptions& c) {
  app.add_option("--checkpoint-dir", c.dir, "save checkpoints here, at the end of each epoch (and see --checkpoint-every)");
  app.add_option("--checkpoint-every", c.every, "also save every N updates (0: at epoch ends only)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--keep", c.keep, "keep the newest K checkpoints (0: all)")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--resume", c.resume,
                 "continue from a checkpoint: auto (the latest in --checkpoint-dir, or start afresh when there is none) "
                 "or a checkpoint directory");
  app.add_flag("!--sync-checkpoint", c.async, "write checkpoints before training goes on (default: in the background)");
}

void add_reporting_flags(CLI::App& app, ReportingFlags& r) {
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
  app.add_option("--tensorboard", r.tensorboard,
                 "write TensorBoard event files here (loss, accuracy, learning rate, samples/s, exposed "
                 "communication share; staleness for parameter servers)");
}

std::optional<DType> autocast_type(const std::string& precision) {
  if (precision == "bf16") return DType::bf16;
  if (precision == "f16") return DType::f16;
  return std::nullopt;
}

int run_example(const char* program, double timeout_s, const std::function<int(const dist::CommunicatorPtr&)>& body) {
  return dist::run_program(program, body,
                           {.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000))});
}

}  // namespace dtrain::examples
