#include "dtrain/autograd/autocast.h"
#include "dtrain/data/tensor_dataset.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/train/loop.h"
#include "dtrain/train/metrics_log.h"
#include "support/test_support.h"

#include <fstream>
#include <nlohmann/json.hpp>

using namespace dtrain;

namespace {
// Two Gaussian blobs in 2-D, centred at (-1.5, 0) and (1.5, 0): nearly separable.
std::shared_ptr<data::TensorDataset> blobs(std::int64_t n, std::uint64_t seed) {
  Generator gen(seed);
  Tensor x = Tensor::empty({n, 2});
  normal_(x, 0, 0.5, &gen);
  Tensor labels = Tensor::empty({n}, {DType::i64});
  bernoulli_(labels, 0.5, &gen);
  Tensor shift = mul(sub(labels.to(DType::f32), 0.5), 3.0);  // -1.5 or +1.5
  Tensor xs = x.select(1, 0);
  xs.copy_(add(xs, shift));
  return std::make_shared<data::TensorDataset>(x, labels);
}
}  // namespace

TEST_CASE("train_epoch learns a separable problem and evaluate measures it", "[train][cpu]") {
  manual_seed(5);
  auto model = nn::mlp(2, {16}, 2);
  optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  data::DataLoader train(blobs(512, 1), {.batch_size = 32, .shuffle = true, .seed = 1});
  data::DataLoader test(blobs(256, 2), {.batch_size = 100});
  train::EpochStats s;
  for (int epoch = 0; epoch < 3; ++epoch) {
    train.set_epoch(epoch);
    s = train::train_epoch(*model, train, sgd, {});
  }
  CHECK(s.steps == 16);
  CHECK(s.samples == 512);
  train::EvalStats e = train::evaluate(*model, test);
  CHECK(e.samples == 256);
  CHECK(e.accuracy() > 0.95);
  CHECK(model->is_training());  // evaluate restores the mode
}

TEST_CASE("train_epoch applies the schedule and stops on divergence", "[train][cpu]") {
  auto model = nn::mlp(2, {4}, 2);
  optim::SGD sgd(model->parameters(), {.lr = 1.0});
  data::DataLoader loader(blobs(64, 3), {.batch_size = 16});
  optim::ConstantLr tiny(1e-4);
  train::train_epoch(*model, loader, sgd, {.schedule = &tiny});
  CHECK(sgd.lr() == 1e-4);
  optim::ConstantLr huge(1e30);
  CHECK_THROWS_WITH(train::train_epoch(*model, loader, sgd, {.schedule = &huge}), Catch::Contains("diverged"));
}

TEST_CASE("train_epoch under f16 autocast with a loss scaler learns, and skips overflowing steps", "[train][cpu]") {
  manual_seed(5);
  auto model = nn::mlp(2, {16}, 2);
  optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  data::DataLoader train(blobs(512, 1), {.batch_size = 32, .shuffle = true, .seed = 1});
  data::DataLoader test(blobs(256, 2), {.batch_size = 100});
  // A scale past f16's range (gradients of about 2^24 / 32): the first steps overflow and
  // are skipped (no divergence error), the scale backs off until steps go through, and the
  // model still learns.
  optim::LossScaler scaler({.init_scale = 1 << 24, .growth_interval = 1000});
  for (int epoch = 0; epoch < 3; ++epoch) {
    train.set_epoch(epoch);
    train::train_epoch(*model, train, sgd, {.autocast = DType::f16, .scaler = &scaler});
  }
  CHECK(scaler.scale_value() < 1 << 24);
  CHECK(train::evaluate(*model, test, DType::f16).accuracy() > 0.95);
  // Without autocast given, the loop leaves the caller's setting alone.
  AutocastGuard outer(DType::bf16);
  train::train_epoch(*model, train, sgd, {});
  CHECK(autocast_dtype() == DType::bf16);
}

TEST_CASE("count_correct compares argmax with labels", "[train][cpu]") {
  Tensor logits = Tensor::from_vector<float>({0.1f, 0.9f, 2.0f, 1.0f, 0.0f, 0.5f}, {3, 2});
  CHECK(train::count_correct(logits, Tensor::from_vector<std::int64_t>({1, 0, 0}, {3})) == 2);
}

TEST_CASE("MetricsLog writes one JSON object per line", "[train][cpu]") {
  test::TempDir dir;
  {
    train::MetricsLog log(dir / "m.jsonl");
    log.write("epoch", {{"epoch", 1}, {"test_accuracy", 0.9}});
    log.write("epoch", {{"epoch", 2}, {"test_accuracy", 0.91}});
  }
  std::ifstream in(dir / "m.jsonl");
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  REQUIRE(lines.size() == 2);
  CHECK(lines[1]["event"] == "epoch");
  CHECK(lines[1]["test_accuracy"] == 0.91);
  CHECK_THROWS_WITH(train::MetricsLog(dir / "missing" / "m.jsonl"), Catch::Contains("cannot open"));
}

TEST_CASE("Progress prints plain lines when not on a terminal", "[train][cpu]") {
  test::TempDir dir;
  std::FILE* f = std::fopen((dir / "out.txt").c_str(), "w+");
  {
    train::Progress p("epoch 1/1", 3, true, f, 0.0);
    for (int i = 1; i <= 3; ++i) p.update(i, 0.5, 10);
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
