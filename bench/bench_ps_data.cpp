// bench_ps_data: how long asynchronous parameter-server workers wait for their data when
// reading a sample is slow (JPEG decoding, a remote store), which is what decides whether
// handed-out batches are prefetched. Fashion-MNIST examples behind a dataset whose get()
// sleeps --delay-us per sample; W workers and one server train the MLP for one epoch with
// --loader-threads threads each, and the chief reports per repetition:
//   data_wait_s   seconds its training thread waited for batches (the Data phase)
//   epoch_s       its training seconds
//   samples_per_s over every worker
//
//   mpirun -np 3 bench_ps_data --delay-us 300 --reps 5 [--json]
//
// It builds against 11555e7 as well (the strategy's constructor there), so that the figure
// before handed-out batches went through the prefetching loader comes from the same code.
#include "dtrain/core/parallel.h"
#include "dtrain/data/mnist.h"
#include "dtrain/data/subset.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/train/trainer.h"
#if __has_include("dtrain/dist/strategy/strategy_factory.h")
#include "dtrain/dist/strategy/strategy_factory.h"
#else
#include "dtrain/dist/ps_strategy.h"  // 11555e7's flat layout
#endif

#include "bench_stats.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <thread>

namespace {

using namespace dtrain;

// Another dataset's examples, each read `delay` late.
class SlowDataset final : public data::Dataset {
 public:
  SlowDataset(std::shared_ptr<const data::Dataset> inner, std::chrono::microseconds delay)
      : inner_(std::move(inner)), delay_(delay) {}
  std::int64_t size() const override { return inner_->size(); }
  data::Example get(std::int64_t index) const override {
    std::this_thread::sleep_for(delay_);
    return inner_->get(index);
  }

 private:
  std::shared_ptr<const data::Dataset> inner_;
  std::chrono::microseconds delay_;
};

struct Config {
  std::string data = "/usr/share/datasets/fashion-mnist";
  int delay_us = 300;
  int loader_threads = 1;
  std::int64_t limit_train = 6400;
  std::int64_t batch = 64;
  int reps = 5;
  bool json = false;
};

std::shared_ptr<dist::Strategy> async_ps(const dist::CommunicatorPtr& world) {
#if __has_include("dtrain/dist/strategy/strategy_factory.h")
  return dist::make_strategy("ps=1,mode=async", world, Device::cpu());
#else
  return std::make_shared<dist::ParameterServerStrategy>(world, dist::PsOptions{.mode = dist::PsMode::Async});
#endif
}

int run(const Config& c, const dist::CommunicatorPtr& world) {
  auto train = data::Subset::first(data::MnistDataset::load(c.data, data::MnistDataset::Split::Train), c.limit_train);
  auto slow = std::make_shared<SlowDataset>(train, std::chrono::microseconds(c.delay_us));
  std::vector<double> waits, epochs, rates;
  for (int rep = 0; rep < c.reps; ++rep) {
    manual_seed(1);
    auto strategy = async_ps(world);
    auto model = strategy->prepare(nn::mlp(28 * 28, {256}, 10));
    optim::SGD sgd(model->parameters(), {.lr = 0.02, .momentum = 0.7});
    train::Trainer trainer(strategy, {.train = slow, .batch_size = c.batch, .workers = c.loader_threads},
                           {.epochs = 1, .verbose = false});
    const train::FitResult r = trainer.fit(sgd);
    if (!strategy->reports()) continue;
    const train::EpochSummary& e = r.epochs.at(0);
    waits.push_back(e.time[trace::Phase::Data]);
    epochs.push_back(e.seconds);
    rates.push_back(e.samples_per_s);
    if (c.json) {
      fmt::print("{}\n", nlohmann::json{{"bench", "ps_data"},
                                        {"rep", rep},
                                        {"workers", world->size() - 1},
                                        {"delay_us", c.delay_us},
                                        {"loader_threads", c.loader_threads},
                                        {"data_wait_s", waits.back()},
                                        {"epoch_s", epochs.back()},
                                        {"samples_per_s", rates.back()}}
                             .dump());
    }
  }
  if (!waits.empty() && !c.json) {
    fmt::print("bench_ps_data: {} worker(s) + 1 server, async, {} us per sample, {} loader thread(s), {} samples\n",
               world->size() - 1, c.delay_us, c.loader_threads, c.limit_train);
    const bench::Stats w = bench::stats(waits), t = bench::stats(epochs), r = bench::stats(rates);
    fmt::print("{}\n", bench::machine_description());
    fmt::print("data wait (s)   median {:.3f}  [{:.3f}, {:.3f}]\n", w.median_ms / 1e3, w.min_ms / 1e3, w.max_ms / 1e3);
    fmt::print("epoch (s)       median {:.3f}  [{:.3f}, {:.3f}]\n", t.median_ms / 1e3, t.min_ms / 1e3, t.max_ms / 1e3);
    fmt::print("samples/s       median {:.0f}\n", r.median_ms / 1e3);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Data wait of asynchronous parameter-server workers over a slow dataset", "bench_ps_data"};
  Config c;
  app.add_option("--data", c.data, "directory with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--delay-us", c.delay_us, "sleep per sample read")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app.add_option("--loader-threads", c.loader_threads, "loader threads per rank")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--limit-train", c.limit_train, "training examples")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--batch", c.batch, "samples per update")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--reps", c.reps, "repetitions")->check(CLI::Range(1, 100))->capture_default_str();
  app.add_flag("--json", c.json, "one JSON line per repetition");
  CLI11_PARSE(app, argc, argv);
  return dist::run_program("bench_ps_data", [&](const dist::CommunicatorPtr& world) { return run(c, world); });
}
