// Observers of a training run (dtrain/train/observer.h): a program's observer sees every
// hook in the order the Trainer passes them, the loss of the updates it asks for, and the
// end of a run that throws.
#include "dtrain/layers/models.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/train/observer.h"
#include "dtrain/train/trainer.h"
#include "support/test_support.h"
#include "train/blobs.h"

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <vector>

using namespace dtrain;

namespace {

// Writes down every hook it is called with, as one line each.
class Recorder : public train::TrainObserver {
 public:
  std::vector<std::string> seen;
  std::vector<std::int64_t> losses_wanted;  // global steps whose loss it asked for
  std::vector<std::int64_t> losses_got;     // ... and got, equal to the step's own loss
  int guard_events = 0;                     // the guard may warn of a stalling loss: not part of the sequence

  void on_fit_start(const train::FitStart& f) override {
    seen.push_back(fmt::format("fit start {} of {} at {}, {} per epoch", f.first_epoch, f.epochs, f.global_step,
                               f.updates_per_epoch));
  }
  void on_epoch_start(const train::EpochStart& e) override {
    seen.push_back(fmt::format("epoch start {}/{}: {} updates from {}", e.epoch, e.epochs, e.updates, e.first_step));
  }
  bool wants_loss(const train::StepPosition& at) override {
    seen.push_back(fmt::format("wants {} {} {}", at.epoch, at.step, at.global_step));
    const bool want = at.global_step % 3 == 0;
    if (want) losses_wanted.push_back(at.global_step);
    return want;
  }
  void on_step_end(const train::StepEvent& e) override {
    seen.push_back(fmt::format("step {} {} {}", e.epoch, e.step, e.global_step));
    CHECK(e.lr > 0);
    REQUIRE(e.stats != nullptr);
    if (e.global_step % 3 == 0) {
      REQUIRE(e.loss.has_value());
      CHECK(*e.loss == e.stats->loss.item());
      losses_got.push_back(e.global_step);
    }
  }
  void on_pause() override { seen.emplace_back("pause"); }
  void on_evaluation(const train::EvalEvent& e) override {
    seen.push_back(fmt::format("evaluation {} at {} {} step {}: {} samples", e.epoch, e.fraction,
                               e.closes_epoch ? "closing" : "inside", e.global_step, e.result.samples));
  }
  void on_guard(const train::GuardEvent&) override { ++guard_events; }
  void on_train_epoch_end(const train::EpochSummary& s) override {
    seen.push_back(fmt::format("trained {} at {}", s.epoch, s.global_step));
  }
  void on_epoch_end(const train::EpochSummary& s) override {
    seen.push_back(fmt::format("epoch end {} at {}: {} test samples", s.epoch, s.global_step, s.test_samples));
  }
  void on_train_end(const train::FitResult& r) override {
    seen.push_back(fmt::format("train end {}", r.epochs.size()));
  }
  void on_fit_end(const train::FitResult& r) override { seen.push_back(fmt::format("fit end {}", r.epochs.size())); }
  void on_exception(const std::exception_ptr& error) override {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      seen.push_back(fmt::format("exception: {}", e.what()));
    }
  }
};

std::shared_ptr<dist::Strategy> local_mlp() {
  manual_seed(5);
  auto strategy = std::make_shared<dist::LocalStrategy>();
  strategy->prepare(nn::mlp(2, {16}, 2));
  return strategy;
}

}  // namespace

TEST_CASE("An observer sees every update, evaluation and epoch end in order", "[train][cpu]") {
  test::TempDir dir;
  auto strategy = local_mlp();
  optim::SGD sgd(strategy->module().parameters(), {.lr = 0.1, .momentum = 0.9});
  std::FILE* out = std::fopen((dir / "out.txt").c_str(), "w+");
  // 16 updates per epoch, with an evaluation after the 8th.
  train::Trainer trainer(strategy, {.train = test::blobs(512, 1), .test = test::blobs(200, 2), .batch_size = 32},
                         {.epochs = 2, .evaluations_per_epoch = 2, .verbose = false, .out = out});
  auto recorder = std::make_shared<Recorder>();
  trainer.add_observer(recorder);
  // The older form is an observer too, called after the one added before it.
  trainer.on_step_end(
      [&](const train::StepEvent& e) { recorder->seen.push_back(fmt::format("callback {}", e.global_step)); });
  const train::FitResult r = trainer.fit(sgd);
  std::fclose(out);
  REQUIRE(r.epochs.size() == 2);

  std::vector<std::string> expected{"fit start 1 of 2 at 0, 16 per epoch"};
  for (int epoch = 1; epoch <= 2; ++epoch) {
    expected.push_back(fmt::format("epoch start {}/2: 16 updates from 0", epoch));
    for (std::int64_t step = 1; step <= 16; ++step) {
      const std::int64_t global = (epoch - 1) * 16 + step;
      expected.push_back(fmt::format("wants {} {} {}", epoch, step, global));
      expected.push_back(fmt::format("step {} {} {}", epoch, step, global));
      expected.push_back(fmt::format("callback {}", global));
      if (step == 8) {
        expected.emplace_back("pause");
        expected.push_back(fmt::format("evaluation {} at 0.5 inside step {}: 200 samples", epoch, global));
      }
    }
    expected.emplace_back("pause");
    expected.push_back(fmt::format("trained {} at {}", epoch, epoch * 16));
    expected.push_back(fmt::format("evaluation {} at 1 closing step {}: 200 samples", epoch, epoch * 16));
    expected.push_back(fmt::format("epoch end {} at {}: 200 test samples", epoch, epoch * 16));
  }
  expected.emplace_back("train end 2");
  expected.emplace_back("fit end 2");
  CHECK(recorder->seen == expected);
  // wants_loss was asked at every update (in the sequence above), and the updates it wanted
  // came with their loss.
  CHECK(recorder->losses_wanted.size() == 10);  // global steps 3, 6, ..., 30
  CHECK(recorder->losses_got == recorder->losses_wanted);
}

TEST_CASE("Observers hear of an error that ends fit(), and a null one is refused", "[train][cpu]") {
  auto strategy = local_mlp();
  optim::SGD sgd(strategy->module().parameters(), {.lr = 0.1});
  train::Trainer trainer(strategy, {.train = test::blobs(256, 1), .batch_size = 32}, {.epochs = 1, .verbose = false});
  CHECK_THROWS_WITH(trainer.add_observer(nullptr), Catch::Contains("no observer given"));
  auto recorder = std::make_shared<Recorder>();
  trainer.add_observer(recorder);
  trainer.on_step_end([](const train::StepEvent& e) {
    if (e.global_step == 2) throw std::runtime_error("observer failed at step 2");
  });
  CHECK_THROWS_WITH(trainer.fit(sgd), Catch::Contains("observer failed at step 2"));
  REQUIRE(!recorder->seen.empty());
  CHECK(recorder->seen.back() == "exception: observer failed at step 2");
  CHECK(recorder->seen[recorder->seen.size() - 2] == "step 1 2 2");
}
