// PipelineStrategy against the unpipelined model on the same global batch, at any world
// size W (1 as a plain process, 2 and 4 under mpirun): K = W stages, and at W = 4 also a
// 2 x 2 grid (2 stages x 2 data-parallel replicas). For every schedule (the zero-bubble
// ones included) and M in {1, 2, 4, 8}: the loss, every parameter's gradient after one step, and the parameters
// after 3 steps of SGD with momentum equal the reference's within 1e-5 (relative, plus
// 1e-6 absolute: f32 sums in another order). Checks are CHECKs that do not stop the test,
// so that every rank takes part in every collective; bad configurations throw on every rank.
#include "dtrain/autograd/functions.h"
#include "dtrain/dist/pipeline/pipeline_partition.h"
#include "dtrain/dist/pipeline/pipeline_strategy.h"
#include "dtrain/layers/activation.h"
#include "dtrain/layers/linear.h"
#include "dtrain/layers/models.h"
#include "dtrain/layers/normalization.h"
#include "dtrain/optim/clip_grad.h"
#include "dtrain/optim/loss_scaler.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/tensor/memory_stats.h"
#include "support/test_support.h"

#include <map>

using namespace dtrain;
using dist::PipelineSchedule;

namespace {

constexpr std::int64_t kFeatures = 6, kClasses = 4, kBatch = 32;
constexpr int kSteps = 3;

std::shared_ptr<nn::Sequential> fresh_model() {
  manual_seed(5);
  // 34 layers, 17 with parameters: two or more in each of 4 stages x 2 virtual stages.
  return nn::mlp(kFeatures, std::vector<std::int64_t>(16, 10), kClasses);
}

dist::MicroBatch global_batch(int step) {
  Generator gen(100 + static_cast<std::uint64_t>(step));
  Tensor x = Tensor::empty({kBatch, kFeatures});
  normal_(x, 0, 1, &gen);
  std::vector<std::int64_t> labels(kBatch);
  for (std::int64_t i = 0; i < kBatch; ++i) labels[static_cast<std::size_t>(i)] = (i * 5 + step) % kClasses;
  return {x, Tensor::from_vector(labels, {kBatch})};
}

dist::MicroBatch rows(const dist::MicroBatch& b, std::int64_t begin, std::int64_t end) {
  return {b.inputs.narrow(0, begin, end - begin), b.targets.narrow(0, begin, end - begin)};
}

optim::SGD make_sgd(const nn::Module& m) { return optim::SGD(m.parameters(), {.lr = 0.1, .momentum = 0.9}); }

Variable mean_loss(const Variable& out, const Tensor& y) { return cross_entropy(out, y); }

struct Result {
  std::map<std::string, Tensor> grads;   // after the first step, by name
  std::map<std::string, Tensor> params;  // after kSteps
  double loss = 0;                       // the first step's, over `loss_rows`
};

// One process, the whole model, the global batch. The loss over rows [begin, end) (the
// pipeline's replica) at the initial parameters.
Result reference(std::int64_t begin, std::int64_t end, double clip = 0,
                 const std::function<std::shared_ptr<nn::Sequential>()>& build = fresh_model) {
  auto model = build();
  optim::SGD sgd = make_sgd(*model);
  Result r;
  {
    NoGradGuard no_grad;
    const dist::MicroBatch b = rows(global_batch(0), begin, end);
    r.loss = mean_loss(model->forward(Variable(b.inputs)), b.targets).data().item();
  }
  for (int step = 0; step < kSteps; ++step) {
    sgd.zero_grad();
    const dist::MicroBatch b = global_batch(step);
    mean_loss(model->forward(Variable(b.inputs)), b.targets).backward();
    if (clip > 0) optim::clip_grad_norm(model->parameters(), clip);
    if (step == 0) {
      for (const auto& [name, p] : model->named_parameters()) r.grads[name] = p.grad().clone();
    }
    sgd.step();
  }
  for (const auto& [name, p] : model->named_parameters()) r.params[name] = p.data().clone();
  return r;
}

struct Run {
  Result result;
  bool last_stage = false;
  std::int64_t begin = 0, end = 0;  // this replica's rows
};

using Prepare = std::function<std::shared_ptr<nn::Module>(dist::PipelineStrategy&)>;

Run pipelined(
    const dist::CommunicatorPtr& world, dist::PipelineOptions options, double clip = 0,
    const Prepare& prepare = [](dist::PipelineStrategy& s) { return s.prepare(fresh_model()); }) {
  auto strategy = std::make_shared<dist::PipelineStrategy>(world, Device::cpu(), options);
  auto stage = prepare(*strategy);
  optim::SGD sgd = make_sgd(*stage);
  Run run;
  run.last_stage = strategy->stage() == strategy->loss_stage();
  const std::int64_t per = kBatch / strategy->replicas();
  run.begin = strategy->replica() * per;
  run.end = run.begin + per;
  const dist::StepConfig config{.loss = mean_loss, .clip_grad_norm = clip};
  for (int step = 0; step < kSteps; ++step) {
    const dist::MicroBatch mine = rows(global_batch(step), run.begin, run.end);
    const dist::StepStats stats = strategy->train_step(std::span(&mine, 1), sgd, config);
    if (step == 0) {
      if (run.last_stage) run.result.loss = stats.loss.item();
      for (const auto& [name, p] : stage->named_parameters()) run.result.grads[name] = p.grad().clone();
    }
  }
  for (const auto& [name, p] : stage->named_parameters()) run.result.params[name] = p.data().clone();
  return run;
}

// The largest difference relative to the reference's size (1e-6 absolute floor).
double worst(const std::map<std::string, Tensor>& mine, const std::map<std::string, Tensor>& ref) {
  double w = 0;
  for (const auto& [name, t] : mine) {
    const Tensor& r = ref.at(name);
    const double scale = std::max(1e-6 / 1e-5, max_abs_diff(r, Tensor::zeros(r.shape())));
    w = std::max(w, max_abs_diff(t, r) / scale);
  }
  return w;
}

struct Layout {
  int stages;
  PipelineSchedule schedule;
  int virtual_stages;
  int micro_batches;
};

std::vector<Layout> layouts(int world) {
  std::vector<Layout> out;
  for (int k : {world, world / 2}) {
    if (k < 1 || (k == world / 2 && world < 4)) continue;  // grids at W = 4
    for (int m : {1, 2, 4, 8}) {
      out.push_back({k, PipelineSchedule::GPipe, 1, m});
      out.push_back({k, PipelineSchedule::OneFOneB, 1, m});
      if (k >= 2 && m % k == 0) out.push_back({k, PipelineSchedule::Interleaved, 2, m});
      out.push_back({k, PipelineSchedule::ZeroBubbleH1, 1, m});
      out.push_back({k, PipelineSchedule::ZeroBubbleV, 2, m});
    }
  }
  return out;
}

}  // namespace

TEST_CASE("Pipelined training equals the unpipelined model for every schedule and micro-batch count",
          "[dist][mpi][pipeline]") {
  auto world = dist::world();
  for (const Layout& l : layouts(world->size())) {
    const Run run = pipelined(world, {.stages = l.stages,
                                      .micro_batches = l.micro_batches,
                                      .schedule = l.schedule,
                                      .virtual_stages = l.virtual_stages});
    const Result ref = reference(run.begin, run.end);
    INFO(dist::schedule_name(l.schedule) << " K=" << l.stages << " V=" << l.virtual_stages << " M=" << l.micro_batches
                                         << " D=" << world->size() / l.stages);
    CHECK(!run.result.grads.empty());
    CHECK(worst(run.result.grads, ref.grads) < 1e-5);
    CHECK(worst(run.result.params, ref.params) < 1e-5);
    if (run.last_stage) CHECK(run.result.loss == Approx(ref.loss).epsilon(1e-6));
  }
}

TEST_CASE("Pipelined training with recomputation and clipping equals the unpipelined model", "[dist][mpi][pipeline]") {
  auto world = dist::world();
  // Clipping must use the norm over every stage: 0.05 is below it here, so it acts.
  const Run run = pipelined(world, {.stages = world->size(), .micro_batches = 4, .recompute = true}, 0.05);
  const Result ref = reference(run.begin, run.end, 0.05);
  CHECK(worst(run.result.grads, ref.grads) < 1e-5);
  CHECK(worst(run.result.params, ref.params) < 1e-5);
}

TEST_CASE("Recomputing one stage leaves the gradients unchanged and lowers that stage's peak memory",
          "[dist][mpi][pipeline]") {
  auto world = dist::world();
  const int K = world->size();
  // GPipe keeps every micro-batch's activations until its backwards: recomputation keeps
  // only each chunk's input. 64-wide layers on 256 rows: activations dominate the step.
  constexpr std::int64_t kRows = 256;
  Tensor x = test::random_tensor({kRows, kFeatures}, 71);
  std::vector<std::int64_t> labels(kRows);
  for (std::int64_t i = 0; i < kRows; ++i) labels[static_cast<std::size_t>(i)] = i % kClasses;
  const dist::MicroBatch batch{x, Tensor::from_vector(labels, {kRows})};
  struct Measured {
    std::map<std::string, Tensor> grads;
    std::size_t peak = 0;  // above what was in use before the step
  };
  auto measure = [&](std::vector<int> recompute_stages) {
    manual_seed(12);
    auto strategy = std::make_shared<dist::PipelineStrategy>(
        world, Device::cpu(),
        dist::PipelineOptions{.stages = K,
                              .micro_batches = 8,
                              .schedule = PipelineSchedule::GPipe,
                              .recompute_stages = std::move(recompute_stages)});
    auto stage = strategy->prepare(nn::mlp(kFeatures, std::vector<std::int64_t>(16, 64), kClasses));
    optim::SGD sgd = make_sgd(*stage);
    const dist::StepConfig config{.loss = mean_loss};
    strategy->train_step(std::span(&batch, 1), sgd, config);  // warm: gradients held, as in training
    const std::size_t before = memory_stats(Device::cpu()).in_use_bytes;
    reset_peak_memory(Device::cpu());
    strategy->train_step(std::span(&batch, 1), sgd, config);
    Measured m;
    m.peak = memory_stats(Device::cpu()).peak_bytes - before;
    for (const auto& [name, p] : stage->named_parameters()) m.grads[name] = p.grad().clone();
    return m;
  };
  const Measured plain = measure({}), recomputed = measure({0});
  CHECK(worst(recomputed.grads, plain.grads) < 1e-6);
  INFO("stage " << world->rank() << " peak " << recomputed.peak << " bytes recomputing stage 0, " << plain.peak
                << " without");
  if (world->rank() == 0) CHECK(recomputed.peak < plain.peak / 2);
  // The other stages keep their activations (what the messages in flight hold varies a little).
  else CHECK(recomputed.peak > plain.peak * 9 / 10);
  CHECK_THROWS_WITH(dist::PipelineStrategy(world, Device::cpu(), {.stages = K, .recompute_stages = {K}}),
                    Catch::Contains("recompute_stages names stage " + std::to_string(K)));
}

TEST_CASE("A pipeline with a loss scaler takes the unpipelined model's steps", "[dist][mpi][pipeline]") {
  auto world = dist::world();
  // A power-of-two scale is exact: scaled and unscaled steps agree to rounding. Every stage
  // sums its squared norm with the others' to agree on whether to step.
  optim::LossScaler scaler({.init_scale = 1024});
  auto strategy = std::make_shared<dist::PipelineStrategy>(
      world, Device::cpu(), dist::PipelineOptions{.stages = world->size(), .micro_batches = 4});
  auto stage = strategy->prepare(fresh_model());
  optim::SGD sgd = make_sgd(*stage);
  const dist::StepConfig config{.loss = mean_loss, .scaler = &scaler};
  for (int step = 0; step < kSteps; ++step) {
    const dist::MicroBatch b = global_batch(step);
    strategy->train_step(std::span(&b, 1), sgd, config);
  }
  std::map<std::string, Tensor> params;
  for (const auto& [name, p] : stage->named_parameters()) params[name] = p.data().clone();
  CHECK(worst(params, reference(0, kBatch).params) < 1e-5);
  CHECK(scaler.scale_value() == 1024);  // no step skipped
}

TEST_CASE("Stages balanced by measured time train like the unpipelined model", "[dist][mpi][pipeline]") {
  auto world = dist::world();
  const std::vector<double> costs = dist::measured_costs(*fresh_model(), global_batch(0).inputs);
  CHECK(costs.size() == fresh_model()->size());
  CHECK(std::all_of(costs.begin(), costs.end(), [](double c) { return c > 0 && c < 10; }));
  // Rank 0 times the layers and shares the costs, so every rank cuts the same way (checked
  // in prepare(), which would throw otherwise).
  const Run run = pipelined(world, {.stages = world->size(),
                                    .balance = dist::PipelineOptions::Balance::Time,
                                    .profile_input = global_batch(0).inputs});
  const Result ref = reference(run.begin, run.end);
  CHECK(worst(run.result.params, ref.params) < 1e-5);
  CHECK_THROWS_WITH(dist::PipelineStrategy(world, Device::cpu(),
                                           {.stages = world->size(), .balance = dist::PipelineOptions::Balance::Time})
                        .prepare(fresh_model()),
                    Catch::Contains("profile_input"));
}

TEST_CASE("Stages built layer by layer train like the model built whole", "[dist][mpi][pipeline]") {
  auto world = dist::world();
  constexpr std::uint64_t kSeed = 77;
  // fresh_model()'s layers one at a time: Flatten, then Linear and ReLU, ..., Linear.
  int built = 0;
  const dist::PipelineStrategy::LayerFactory layer = [&](int i) -> nn::ModulePtr {
    ++built;
    if (i == 0) return std::make_shared<nn::Flatten>();
    if (i == 17) return std::make_shared<nn::Linear>(10, kClasses);
    if (i % 2 == 0) return std::make_shared<nn::ReLU>();
    return std::make_shared<nn::Linear>(i == 1 ? kFeatures : 10, 10);
  };
  // The reference, built whole from the same layers and seeds.
  auto whole = [&] {
    auto model = std::make_shared<nn::Sequential>();
    for (int i = 0; i < 18; ++i) {
      default_generator().set_state(kSeed + static_cast<std::uint64_t>(i), 0);
      model->push_back(layer(i));
    }
    return model;
  };
  for (const bool cut : {false, true}) {
    dist::PipelineOptions options{.stages = world->size(), .micro_batches = 4};
    for (int i = 1; cut && i < world->size(); ++i) options.cuts.push_back(4 * i);
    built = 0;
    const Run run =
        pipelined(world, options, 0, [&](dist::PipelineStrategy& s) { return s.prepare_layers(18, layer, kSeed); });
    const int built_here = built;
    const Result ref = reference(run.begin, run.end, 0, whole);
    INFO((cut ? "given cuts" : "balanced"));
    CHECK(worst(run.result.params, ref.params) < 1e-5);
    // Given the cuts, a rank builds only its own layers; balancing builds each once.
    if (cut && world->size() > 1)
      CHECK(built_here == (world->rank() == world->size() - 1 ? 18 - 4 * (world->size() - 1) : 4));
    if (!cut) CHECK(built_here == 18);
  }
}

TEST_CASE("A 2 x 2 grid with SyncBatchNorm normalizes each micro-batch over the stage's replicas",
          "[dist][mpi][pipeline]") {
  auto world = dist::world();
  if (world->size() != 4) return;  // a grid of 2 stages x 2 replicas
  constexpr int kMicro = 2;
  auto bn_model = [] {
    manual_seed(9);
    return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Linear>(kFeatures, 10), std::make_shared<nn::BatchNorm1d>(10),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(10, 10), std::make_shared<nn::BatchNorm1d>(10),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(10, kClasses)});
  };
  dist::PipelineOptions options{.stages = 2, .micro_batches = kMicro, .cuts = {3}};
  options.data_parallel.sync_batch_norm = true;
  const Run run = pipelined(world, options, 0, [&](dist::PipelineStrategy& s) { return s.prepare(bn_model()); });
  // The reference: one process, each update's micro-batch j made of every replica's part j
  // (what SyncBatchNorm normalizes together), the gradients accumulated with weight 1/M.
  auto model = bn_model();
  optim::SGD sgd = make_sgd(*model);
  const std::int64_t per_replica = kBatch / 2, part = per_replica / kMicro;
  for (int step = 0; step < kSteps; ++step) {
    sgd.zero_grad();
    const dist::MicroBatch b = global_batch(step);
    for (int j = 0; j < kMicro; ++j) {
      std::vector<Tensor> xs, ys;
      for (int r = 0; r < 2; ++r) {
        const dist::MicroBatch p = rows(b, r * per_replica + j * part, r * per_replica + (j + 1) * part);
        xs.push_back(p.inputs);
        ys.push_back(p.targets);
      }
      mul(mean_loss(model->forward(Variable(cat(xs, 0))), cat(ys, 0)), 1.0 / kMicro).backward();
    }
    sgd.step();
  }
  std::map<std::string, Tensor> ref;
  for (const auto& [name, p] : model->named_parameters()) ref[name] = p.data().clone();
  CHECK(!run.result.params.empty());
  CHECK(worst(run.result.params, ref) < 1e-5);
}

TEST_CASE("Pipeline stages keep the whole model's parameter names, and only their own", "[dist][mpi][pipeline]") {
  auto world = dist::world();
  auto strategy =
      std::make_shared<dist::PipelineStrategy>(world, Device::cpu(), dist::PipelineOptions{.stages = world->size()});
  auto stage = strategy->prepare(fresh_model());
  const auto whole = fresh_model()->named_parameters();
  std::int64_t mine = stage->num_parameters();
  Tensor total = Tensor::full({1}, static_cast<double>(mine), {DType::f64});
  world->all_reduce(total, dist::ReduceOp::Sum);
  CHECK(total.item() == Approx(static_cast<double>(fresh_model()->num_parameters())));
  for (const auto& [name, p] : stage->named_parameters()) {
    const auto it = std::find_if(whole.begin(), whole.end(), [&](const auto& w) { return w.first == name; });
    CHECK(it != whole.end());
  }
  CHECK(strategy->reports() == (world->rank() == world->size() - 1));
  CHECK(strategy->cuts().size() == static_cast<std::size_t>(world->size() - 1));
  CHECK_THROWS_WITH(stage->forward(Variable(Tensor::zeros({1, kFeatures}))), Catch::Contains("train_step"));
}

TEST_CASE("Pipeline configurations that cannot work are refused before any work", "[dist][mpi][pipeline]") {
  auto world = dist::world();
  const int w = world->size();
  CHECK_THROWS_WITH(dist::PipelineStrategy(world, Device::cpu(), {.stages = w + 1}),
                    Catch::Contains("not a multiple of the " + std::to_string(w + 1) + " stages"));
  CHECK_THROWS_WITH(
      dist::PipelineStrategy(
          world, Device::cpu(),
          {.stages = w, .micro_batches = 2 * w + 1, .schedule = PipelineSchedule::Interleaved, .virtual_stages = 2}),
      Catch::Contains(w == 1 ? ">= 2 stages" : "multiple of the stages"));
  {
    dist::PipelineStrategy s(world, Device::cpu(), {.stages = w, .micro_batches = 4});
    CHECK(s.data_shard().splits == 4);  // the Trainer refuses micro-batches that 4 does not divide
    CHECK_THROWS_WITH(s.prepare(std::make_shared<nn::Linear>(3, 2)), Catch::Contains("must be a Sequential"));
    // More stages than layers.
    auto one_layer = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{std::make_shared<nn::Linear>(3, 2)});
    if (w >= 2)
      CHECK_THROWS_WITH(s.prepare(one_layer), Catch::Contains("need at least " + std::to_string(w) + " layers"));
  }
  if (w >= 2) {
    // A stage of activations alone would have nothing for its optimizer.
    dist::PipelineOptions relu_stage{.stages = w};
    for (int i = 0; i < w - 1; ++i) relu_stage.cuts.push_back(i + 1);  // stage 0 holds the Flatten alone
    CHECK_THROWS_WITH(dist::PipelineStrategy(world, Device::cpu(), relu_stage).prepare(fresh_model()),
                      Catch::Contains("stage 0") && Catch::Contains("no parameters"));
  }
  CHECK_THROWS_WITH(
      dist::PipelineStrategy(world, Device::cpu(), {.stages = w, .cuts = {1, 1, 1, 1, 1}}).prepare(fresh_model()),
      Catch::Contains("cut points given"));
  if (w >= 2) {
    // Cut points that differ between ranks: every rank throws (a collective check).
    dist::PipelineOptions mismatched{.stages = w};
    for (int i = 0; i < w - 1; ++i) mismatched.cuts.push_back(2 * (i + 1) + (world->rank() == 1 ? 1 : 0));
    dist::PipelineStrategy bad(world, Device::cpu(), mismatched);
    CHECK_THROWS_WITH(bad.prepare(fresh_model()), Catch::Contains("same points"));
  }
}
