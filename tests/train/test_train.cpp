// The Trainer with the Local strategy, against a plain loop written out step by step (the
// loop train_mnist ran before the Trainer existed): same data order, same updates, so the
// parameters must come out bit-identical. Plus gradient accumulation, mixed precision,
// divergence, target accuracy, callbacks and the metrics file.
#include "dtrain/autograd/autocast.h"
#include "dtrain/data/distributed_sampler.h"
#include "dtrain/data/tensor_dataset.h"
#include "dtrain/layers/linear.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/train/metrics_log.h"
#include "dtrain/train/progress.h"
#include "dtrain/train/trainer.h"
#include "support/test_support.h"
#include "train/blobs.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace dtrain;

namespace {
using test::blobs;

std::shared_ptr<dist::Strategy> local_mlp(std::uint64_t seed) {
  manual_seed(seed);
  auto strategy = std::make_shared<dist::LocalStrategy>();
  strategy->prepare(nn::mlp(2, {16}, 2));
  return strategy;
}

optim::SGD make_sgd(const dist::Strategy& s) {
  return optim::SGD(s.module().parameters(), {.lr = 0.1, .momentum = 0.9});
}

// The largest parameter difference between two models of the same architecture.
double max_param_diff(const nn::Module& a, const nn::Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, max_abs_diff(pa[i].data(), pb[i].data()));
  return worst;
}
}  // namespace

TEST_CASE("Trainer with the Local strategy takes exactly the updates of a plain loop", "[train][cpu]") {
  const auto train_set = blobs(512, 1);
  const optim::CosineLr schedule(0.1, 32);
  auto strategy = local_mlp(5);
  optim::SGD sgd = make_sgd(*strategy);
  train::Trainer trainer(strategy, {.train = train_set, .batch_size = 32, .seed = 7}, {.epochs = 2, .verbose = false});
  REQUIRE(trainer.updates_per_epoch() == 16);
  const train::FitResult r = trainer.fit(sgd, &schedule);

  // The reference: what train_mnist's loop did, step by step.
  manual_seed(5);
  auto model = nn::mlp(2, {16}, 2);
  optim::SGD ref(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  data::DataLoader loader(train_set, {.batch_size = 32},
                          std::make_shared<data::DistributedSampler>(512, 0, 1, /*seed=*/7));
  std::int64_t step = 0;
  double last_epoch_loss = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    loader.set_epoch(epoch);
    double loss_sum = 0;
    for (const data::Batch& b : loader) {
      ref.set_lr(schedule.lr_at(step++));
      ref.zero_grad();
      Variable loss = cross_entropy(model->forward(Variable(b.inputs)), b.targets);
      loss.backward();
      ref.step();
      loss_sum += loss.item();
    }
    last_epoch_loss = loss_sum / 16;
  }
  CHECK(max_param_diff(strategy->module(), *model) == 0);
  REQUIRE(r.epochs.size() == 2);
  CHECK(r.epochs[1].train_loss == Approx(last_epoch_loss).epsilon(1e-12));
  CHECK(r.epochs[1].updates == 16);
  CHECK(r.epochs[1].samples == 512);
}

TEST_CASE("Gradient accumulation equals one update over the same batch", "[train][cpu]") {
  // Batch 64 per update as 1 x 64 or 4 x 16: the micro-batches' mean losses weighted by
  // their sizes make the batch's mean loss, so the updates agree up to the order of float
  // sums; 500 examples end each epoch on a batch of 52, as micro-batches of 16, 16, 16, 4.
  const auto train_set = blobs(500, 3);
  auto run = [&](int accumulate) {
    auto strategy = local_mlp(11);
    optim::SGD sgd = make_sgd(*strategy);
    train::Trainer trainer(strategy, {.train = train_set, .batch_size = 64},
                           {.epochs = 2, .accumulate = accumulate, .verbose = false});
    CHECK(trainer.updates_per_epoch() == 8);
    CHECK(trainer.micro_batch_size() == 64 / accumulate);
    train::FitResult r = trainer.fit(sgd);
    return std::make_pair(strategy, r);
  };
  auto [one, r1] = run(1);
  auto [four, r4] = run(4);
  CHECK(max_param_diff(one->module(), four->module()) < 1e-5);
  CHECK(r4.epochs[1].train_loss == Approx(r1.epochs[1].train_loss).epsilon(1e-5));
  CHECK(r4.epochs[1].train_accuracy == r1.epochs[1].train_accuracy);
}

TEST_CASE("Trainer learns, evaluates, stops at the target and calls back", "[train][cpu]") {
  test::TempDir dir;
  auto strategy = local_mlp(5);
  optim::SGD sgd = make_sgd(*strategy);
  std::FILE* out = std::fopen((dir / "out.txt").c_str(), "w+");
  train::Trainer trainer(strategy,
                         {.train = blobs(512, 1), .test = blobs(256, 2), .batch_size = 32, .eval_batch_size = 100},
                         {.epochs = 5, .target_accuracy = 0.9, .metrics = dir / "m.jsonl", .out = out});
  std::int64_t steps = 0, last_global = 0;
  int epochs_seen = 0;
  trainer.on_step_end([&](const train::StepEvent& e) {
    ++steps;
    last_global = e.global_step;
    CHECK(e.stats->samples == 32);
  });
  trainer.on_epoch_end([&](const train::EpochSummary& s) { epochs_seen = s.epoch; });
  const train::FitResult r = trainer.fit(sgd);
  std::fclose(out);
  CHECK(r.reached_target);
  CHECK(r.epochs.size() == 1);  // blobs are separated after one epoch
  CHECK(r.test_accuracy > 0.95);
  CHECK(steps == 16);
  CHECK(last_global == 16);
  CHECK(epochs_seen == 1);
  CHECK(strategy->module().is_training());  // evaluate restores the mode
  const train::EvalResult e = trainer.evaluate();
  CHECK(e.samples == 256);
  CHECK(e.accuracy() == Approx(r.test_accuracy));

  std::ifstream printed(dir / "out.txt");
  std::string text((std::istreambuf_iterator<char>(printed)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("epoch 1/5: train loss"));
  CHECK_THAT(text, Catch::Contains("reached 90.00% test accuracy after 1 epoch(s) in"));
  std::ifstream metrics(dir / "m.jsonl");
  std::string line;
  REQUIRE(std::getline(metrics, line));
  auto j = nlohmann::json::parse(line);
  CHECK(j["event"] == "epoch");
  CHECK(j["test_accuracy"].get<double>() == Approx(r.test_accuracy));
}

TEST_CASE("Trainer evaluates inside epochs and stops there once the target is reached", "[train][cpu]") {
  // 16 updates per epoch, 4 evaluations: after updates 4, 8 and 12, then at the end. The
  // blobs pass 90% within the first epoch, so training stops at one of the inner points;
  // without a target every epoch has its three inner evaluations.
  for (const double target : {0.9, 0.0}) {
    INFO("target " << target);
    test::TempDir dir;
    auto strategy = local_mlp(5);
    optim::SGD sgd = make_sgd(*strategy);
    std::FILE* out = std::fopen((dir / "out.txt").c_str(), "w+");
    train::Trainer trainer(
        strategy, {.train = blobs(512, 1), .test = blobs(256, 2), .batch_size = 32},
        {.epochs = 2, .target_accuracy = target, .evaluations_per_epoch = 4, .metrics = dir / "m.jsonl", .out = out});
    std::int64_t steps = 0;
    trainer.on_step_end([&](const train::StepEvent&) { ++steps; });
    const train::FitResult r = trainer.fit(sgd);
    std::fclose(out);
    std::ifstream metrics(dir / "m.jsonl");
    std::vector<double> inner;  // the epoch positions of the evaluations inside epochs
    for (std::string line; std::getline(metrics, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["event"] == "evaluation") inner.push_back(j["epoch"].get<double>());
    }
    if (target == 0.9) {
      CHECK(r.reached_target);
      REQUIRE(r.epochs.size() == 1);
      REQUIRE(!inner.empty());
      CHECK(steps == static_cast<std::int64_t>(inner.back() * 16 + 0.5));  // stopped there
      CHECK(steps < 16);
      CHECK(r.epochs[0].updates == steps);
      CHECK(r.test_accuracy >= 0.9);
    } else {
      CHECK(!r.reached_target);
      CHECK(steps == 32);
      CHECK(inner == std::vector<double>{0.25, 0.5, 0.75, 1.25, 1.5, 1.75});
    }
  }
}

TEST_CASE("Trainer stops on divergence and rejects batches that do not split", "[train][cpu]") {
  auto strategy = local_mlp(5);
  optim::SGD sgd = make_sgd(*strategy);
  train::Trainer trainer(strategy, {.train = blobs(64, 3), .batch_size = 16},
                         {.verbose = false, .guard = {.rollback = false, .check_every = 1}});
  optim::ConstantLr huge(1e30);
  CHECK_THROWS_WITH(trainer.fit(sgd, &huge), Catch::Contains("training diverged at step 2: non-finite loss"));
  // With rollback (the default) updates 2, 4 and 6 each go back to the start (the update after
  // one is computed from the start's values), and 8 gives up.
  auto fresh = local_mlp(5);  // the other's parameters are NaN now
  optim::SGD fresh_sgd = make_sgd(*fresh);
  train::Trainer healing(fresh, {.train = blobs(144, 3), .batch_size = 16},
                         {.verbose = false, .guard = {.check_every = 1}});
  CHECK_THROWS_WITH(healing.fit(fresh_sgd, &huge), Catch::Contains("training diverged at step 8: non-finite loss") &&
                                                       Catch::Contains("after 3 rollback(s), the most allowed"));
  CHECK_THROWS_WITH(train::Trainer(strategy, {.train = blobs(64, 3), .batch_size = 30}, {.accumulate = 4}),
                    Catch::Contains("batch size 30: must be divisible by the 1 ranks x 4 accumulation steps"));
  CHECK_THROWS_WITH(train::Trainer(std::make_shared<dist::LocalStrategy>(), {.train = blobs(64, 3)}, {}),
                    Catch::Contains("prepare() the model first"));
}

TEST_CASE("Trainer under f16 autocast with a loss scaler learns, and skips overflowing steps", "[train][cpu]") {
  auto strategy = local_mlp(5);
  optim::SGD sgd = make_sgd(*strategy);
  // A scale past f16's range (gradients of about 2^24 / 32): the first steps overflow and
  // are skipped (no divergence error), the scale backs off until steps go through, and the
  // model still learns.
  train::Trainer trainer(strategy, {.train = blobs(512, 1), .test = blobs(256, 2), .batch_size = 32},
                         {.epochs = 3,
                          .autocast = DType::f16,
                          .loss_scaler = {.init_scale = 1 << 24, .growth_interval = 1000},
                          .verbose = false});
  const train::FitResult r = trainer.fit(sgd);
  CHECK(trainer.scaler().scale_value() < 1 << 24);
  CHECK(r.test_accuracy > 0.95);
  // Without autocast configured, the Trainer leaves the caller's setting alone.
  AutocastGuard outer(DType::bf16);
  train::Trainer plain(strategy, {.train = blobs(64, 1), .batch_size = 32}, {.verbose = false});
  plain.fit(sgd);
  CHECK(autocast_dtype() == DType::bf16);
}

TEST_CASE("count_correct compares argmax with labels on the device", "[train][cpu]") {
  Tensor logits = Tensor::from_vector<float>({0.1f, 0.9f, 2.0f, 1.0f, 0.0f, 0.5f}, {3, 2});
  Tensor n = train::count_correct(logits, Tensor::from_vector<std::int64_t>({1, 0, 0}, {3}));
  CHECK(n.dtype() == DType::i64);
  CHECK(n.item() == 2);
}

TEST_CASE("count_top_k_correct counts labels among the k highest logits", "[train][cpu]") {
  // Row 0: label 3 is the 2nd highest; row 1: label 0 is the 4th; row 2: label 1 ties the
  // highest (a tie counts for the label).
  Tensor logits = Tensor::from_vector<float>({0.1f, 0.5f, 0.2f, 0.4f,  //
                                              0.1f, 0.9f, 0.8f, 0.7f,  //
                                              1.0f, 1.0f, 0.0f, 0.0f},
                                             {3, 4});
  const Tensor labels = Tensor::from_vector<std::int64_t>({3, 0, 1}, {3});
  CHECK(train::count_top_k_correct(logits, labels, 1).item() == 1);
  CHECK(train::count_top_k_correct(logits, labels, 2).item() == 2);
  CHECK(train::count_top_k_correct(logits, labels, 3).item() == 2);
  CHECK(train::count_top_k_correct(logits, labels, 4).item() == 3);
}

TEST_CASE("MetricsLog writes one JSON object per line", "[train][cpu]") {
  test::TempDir dir;
  {
    train::MetricsLog log(dir / "m.jsonl");
    log.write("epoch", {{"epoch", 1}, {"test_accuracy", 0.9}});
    log.write("epoch", {{"epoch", 2}, {"test_accuracy", 0.91}}, {{"histogram", {3, 0, 1}}});
  }
  std::ifstream in(dir / "m.jsonl");
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  REQUIRE(lines.size() == 2);
  CHECK(lines[1]["event"] == "epoch");
  CHECK(lines[1]["test_accuracy"] == 0.91);
  CHECK(lines[1]["histogram"] == nlohmann::json::array({3.0, 0.0, 1.0}));
  CHECK_THROWS_WITH(train::MetricsLog(dir / "missing" / "m.jsonl"), Catch::Contains("cannot open"));
}

TEST_CASE("Progress prints plain lines when not on a terminal", "[train][cpu]") {
  test::TempDir dir;
  std::FILE* f = std::fopen((dir / "out.txt").c_str(), "w+");
  {
    train::Progress p("epoch 1/1", 3, true, f, 0.0);
    CHECK(p.due(1));
    for (int i = 1; i <= 3; ++i) p.update(i, 0.5, 10);
    train::Progress quiet("x", 3, false, f, 0.0);
    CHECK_FALSE(quiet.due(3));  // a disabled progress never asks for a value
    train::Progress slow("y", 3, true, f, 3600.0);
    slow.update(1, 0.5, 10);
    CHECK_FALSE(slow.due(2));  // not before the interval, except
    CHECK(slow.due(3));        // for the last step
  }
  std::rewind(f);
  char buf[4096] = {};
  std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  std::string text(buf, n);
  CHECK(text.find("epoch 1/1 3/3 loss 0.5000") != std::string::npos);
  CHECK(text.find('\r') == std::string::npos);
  CHECK(train::format_duration(3723) == "1:02:03");
  CHECK(train::format_duration(61) == "1:01");
}

TEST_CASE("Progress modes: a bar on request, lines in a file, nothing for none", "[train][cpu]") {
  CHECK(train::parse_progress_mode("auto") == train::ProgressMode::Auto);
  CHECK(train::parse_progress_mode("bar") == train::ProgressMode::Bar);
  CHECK(train::parse_progress_mode("lines") == train::ProgressMode::Lines);
  CHECK(train::parse_progress_mode("none") == train::ProgressMode::None);
  CHECK_THROWS_WITH(train::parse_progress_mode("fancy"), Catch::Contains("expected auto, bar, lines or none"));
  test::TempDir dir;
  const auto run = [&](train::ProgressMode mode) {
    const auto path = dir / "progress.txt";
    std::FILE* f = std::fopen(path.c_str(), "w");
    CHECK_FALSE(train::output_is_terminal(f));  // a file, under mpirun or not
    {
      train::Progress p("epoch 1/1", 3, true, f, 0.0, mode);
      for (int i = 1; i <= 3; ++i) p.update(i, 0.25, 10);
    }
    std::fclose(f);
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string bar = run(train::ProgressMode::Bar);
  CHECK(bar.find('\r') != std::string::npos);
  CHECK(bar.find("] 3/3 loss 0.2500") != std::string::npos);
  const std::string automatic = run(train::ProgressMode::Auto);
  CHECK(automatic.find('\r') == std::string::npos);
  CHECK(automatic.find("epoch 1/1 3/3 loss 0.2500") != std::string::npos);
  const std::string lines = run(train::ProgressMode::Lines);
  CHECK(std::count(lines.begin(), lines.end(), '\n') == 3);  // one per update (interval 0)
  CHECK(lines.find('\r') == std::string::npos);
  CHECK(run(train::ProgressMode::None).empty());
}

// Regression: y = x0 - 2 x1 + 0.5, learnt by a linear layer with mean squared error.
TEST_CASE("Trainer takes a loss and metrics of one's own (regression by MSE)", "[train][cpu]") {
  test::TempDir dir;
  const std::int64_t n = 256;
  Generator gen(3);
  Tensor x = Tensor::empty({n, 2});
  normal_(x, 0, 1, &gen);
  Tensor y = add(sub(x.narrow(1, 0, 1), mul(x.narrow(1, 1, 1), 2.0)), 0.5).contiguous();
  auto set = std::make_shared<data::TensorDataset>(x, y);
  manual_seed(4);
  auto strategy = std::make_shared<dist::LocalStrategy>();
  strategy->prepare(std::make_shared<nn::Linear>(2, 1));
  optim::SGD sgd(strategy->module().parameters(), {.lr = 0.05, .momentum = 0.9});
  const train::Metric close{"within_0.1", [](const Tensor& out, const Tensor& target) {
                              return sum(lt(abs(sub(out, target)), Tensor::scalar(0.1)).to(DType::i64));
                            }};
  std::FILE* out = std::fopen((dir / "out.txt").c_str(), "w+");
  train::Trainer trainer(strategy, {.train = set, .test = set, .batch_size = 32},
                         {.epochs = 10,
                          .loss = [](const Variable& o, const Tensor& t) { return mse_loss(o, Variable(t)); },
                          .eval_metrics = std::vector<train::Metric>{close},
                          .metrics = dir / "m.jsonl",
                          .out = out});
  const train::FitResult r = trainer.fit(sgd);
  std::fclose(out);
  CHECK(r.epochs.back().test_loss < 1e-2);  // from about 5 for the untrained layer
  CHECK(r.test_accuracy == 1.0);            // every prediction within 0.1
  REQUIRE(r.epochs.back().test_metrics.size() == 1);
  CHECK(r.epochs.back().test_metrics[0].first == "within_0.1");
  std::ifstream printed(dir / "out.txt");
  std::string text((std::istreambuf_iterator<char>(printed)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("test within 0.1 100.00%"));
  CHECK_THAT(text, !Catch::Contains("test accuracy"));
  std::ifstream metrics(dir / "m.jsonl");
  std::string line;
  REQUIRE(std::getline(metrics, line));
  CHECK(nlohmann::json::parse(line).contains("test_within_0.1"));

  // The loss alone: no metric to count, so no target accuracy either.
  train::Trainer bare(strategy, {.train = set, .batch_size = 32},
                      {.loss = [](const Variable& o, const Tensor& t) { return mse_loss(o, Variable(t)); },
                       .eval_metrics = std::vector<train::Metric>{},
                       .verbose = false});
  CHECK(bare.fit(sgd).epochs.at(0).train_loss < 1e-2);
  CHECK_THROWS_WITH(train::Trainer(strategy, {.train = set, .test = set, .batch_size = 32},
                                   {.eval_metrics = std::vector<train::Metric>{}, .target_accuracy = 0.5}),
                    Catch::Contains("needs a metric to reach it"));
}
