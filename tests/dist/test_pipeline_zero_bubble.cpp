// The zero-bubble schedules' split backward inside the pipeline's engine, at any world size
// (K = W stages): at the first W pass of each chunk (after at least one of its B passes)
// none of the chunk's weight matrices has a gradient, so B left them to W (its biases have
// theirs: B computes the 1-D parameters', and the narrow head's on the last chunk); where
// the plan follows a B on virtual stage 0 at once with its W, both run as one backward; after
// the step every gradient equals the unpipelined model's (1e-5 relative), so W added all of
// them. Over MPI, W passes fill the waits of a stage behind a slow one, and the gradients
// stay the same. On GPUs over NCCL ([nccl]: ctest's dist.np2_nccl, scripts/gpu-check.sh
// --multi-gpu) the same. The schedules' equivalence through PipelineStrategy is in
// test_pipeline.cpp.
#include "dist/pipeline/pipeline_executor.h"
#include "dtrain/autograd/functions.h"
#include "dtrain/comm/nccl.h"
#include "dtrain/layers/activation.h"
#include "dtrain/layers/linear.h"
#include "dtrain/layers/sequential.h"
#include "nccl_ranks.h"
#include "support/test_support.h"

#include <chrono>
#include <thread>

using namespace dtrain;
using dist::PipelineSchedule;

namespace {

constexpr std::int64_t kWidth = 5, kHidden = 17, kClasses = 2;  // the head: 2 x 17, narrow (2 x 8 < 17)
constexpr int kMicro = 4;

// A stage that takes its time: its forward sleeps, so that the next stage waits for it.
class Slow final : public nn::Module {
 public:
  Variable forward(const Variable& x) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return x;
  }
  std::string describe() const override { return "Slow"; }
};

// Virtual stage c's chunk, the same on every rank: Linear then Tanh; the last of `chunks`
// ends with a narrow head; `slow`: virtual stage 0 also sleeps.
nn::ModulePtr make_chunk(int c, int chunks, bool slow = false) {
  manual_seed(40 + static_cast<std::uint64_t>(c));
  std::vector<nn::ModulePtr> layers;
  if (c + 1 < chunks) {
    layers = {std::make_shared<nn::Linear>(kWidth, kWidth), std::make_shared<nn::Tanh>()};
  } else {
    layers = {std::make_shared<nn::Linear>(kWidth, kHidden), std::make_shared<nn::Tanh>(),
              std::make_shared<nn::Linear>(kHidden, kClasses)};
  }
  if (slow && c == 0) layers.push_back(std::make_shared<Slow>());
  return std::make_shared<nn::Sequential>(std::move(layers));
}

// Whether the plan runs chunk v's first W right after its B on virtual stage 0, as one
// backward (pipeline_executor.h).
bool first_weight_with_its_input_pass(PipelineSchedule schedule, const dist::PipelineShape& shape, int rank, int v) {
  if (dist::virtual_stage_of(schedule, shape, rank, v) != 0) return false;
  const std::vector<dist::PipelineAction> actions = dist::schedule_actions(schedule, shape, rank);
  for (std::size_t i = 1; i < actions.size(); ++i) {
    const dist::PipelineAction& a = actions[i];
    if (a.kind != dist::PipelineAction::Kind::Weight || a.chunk != v) continue;
    const dist::PipelineAction& b = actions[i - 1];
    return b.kind == dist::PipelineAction::Kind::Backward && b.chunk == v && b.micro == a.micro;
  }
  return false;
}

Variable micro_loss(const Variable& out) { return mul(sum(mul(out, out)), 0.5); }

// One step of `schedule` over the world's ranks, the chunks on `device` and their tensors
// through `tensor_comm`, checked as the file's comment says. CHECKs, not REQUIREs: every
// rank must reach the next run.
// Returns the run's timing.
dist::PipelineExecutor::Timing check_split_step(const dist::CommunicatorPtr& world,
                                                const dist::CommunicatorPtr& tensor_comm, Device device,
                                                PipelineSchedule schedule, bool slow_first_stage = false) {
  INFO(dist::schedule_name(schedule) << " on " << device.str() << (slow_first_stage ? ", a slow first stage" : ""));
  const int K = world->size(), V = dist::fixed_virtual_stages(schedule);
  const dist::PipelineShape shape{K, V, kMicro};
  std::vector<Tensor> inputs;
  for (int m = 0; m < kMicro; ++m)
    inputs.push_back(test::random_tensor({3, kWidth}, 60 + static_cast<std::uint64_t>(m)));
  std::vector<nn::ModulePtr> chunks;
  for (int v = 0; v < V; ++v) {
    chunks.push_back(make_chunk(dist::virtual_stage_of(schedule, shape, world->rank(), v), K * V, slow_first_stage));
    chunks.back()->to(device);
  }
  dist::PipelineExecutor executor(
      {.comm = world, .tensor_comm = tensor_comm, .device = device, .schedule = schedule, .virtual_stages = V}, chunks);
  std::vector<int> weight_passes(static_cast<std::size_t>(V), 0), input_passes(static_cast<std::size_t>(V), 0);
  const auto before_gradients = [&](int chunk, dist::PipelineAction::Kind kind, bool last) {
    const auto v = static_cast<std::size_t>(chunk);
    if (kind == dist::PipelineAction::Kind::Backward) {
      CHECK(last == (++input_passes[v] == kMicro));
      return;
    }
    REQUIRE(kind == dist::PipelineAction::Kind::Weight);
    if (weight_passes[v]++ == 0) {
      CHECK(input_passes[v] >= 1);
      const bool whole = first_weight_with_its_input_pass(schedule, shape, world->rank(), chunk);
      for (const Variable& p : chunks[v]->parameters()) {
        // Called right before B and W run as one: nothing yet. Otherwise after a B, before
        // any W: the biases and the narrow head have their gradient, the other matrices none.
        const bool narrow = p.dim() == 2 && p.size(0) * 8 < p.size(1);
        CHECK(p.has_grad() == (!whole && (p.dim() == 1 || narrow)));
      }
    }
    CHECK(last == (weight_passes[v] == kMicro));
  };
  std::vector<Tensor> on_device;
  for (const Tensor& x : inputs) on_device.push_back(x.to(device));
  const dist::PipelineExecutor::Timing timing = executor.run(
      on_device, /*train=*/true, std::nullopt, [](const Variable& out, int, bool) { return micro_loss(out); },
      before_gradients);
  for (int v = 0; v < V; ++v) {
    CHECK(weight_passes[static_cast<std::size_t>(v)] == kMicro);
    CHECK(input_passes[static_cast<std::size_t>(v)] == kMicro);
  }
  // The reference: every chunk in order in this process on the CPU, the micro-batches'
  // gradients summed.
  std::vector<nn::ModulePtr> whole;
  for (int c = 0; c < K * V; ++c) whole.push_back(make_chunk(c, K * V));
  for (const Tensor& x : inputs) {
    Variable h(x);
    for (const auto& chunk : whole) h = chunk->forward(h);
    micro_loss(h).backward();
  }
  for (int v = 0; v < V; ++v) {
    const auto mine = chunks[static_cast<std::size_t>(v)]->parameters();
    const auto ref =
        whole[static_cast<std::size_t>(dist::virtual_stage_of(schedule, shape, world->rank(), v))]->parameters();
    for (std::size_t i = 0; i < mine.size(); ++i) {
      CHECK(mine[i].has_grad());
      if (!mine[i].has_grad()) continue;
      const Tensor expected = ref[i].grad();
      const double scale = std::max(0.1, max_abs_diff(expected, Tensor::zeros(expected.shape())));
      CHECK(max_abs_diff(mine[i].grad().to(Device::cpu()), expected) < 1e-5 * scale);
    }
  }
  return timing;
}

}  // namespace

TEST_CASE("Zero-bubble W passes add the weight gradients that B passes leave unset", "[dist][mpi][pipeline]") {
  auto world = dist::world();
  for (PipelineSchedule schedule : {PipelineSchedule::ZeroBubbleH1, PipelineSchedule::ZeroBubbleV}) {
    check_split_step(world, world, Device::cpu(), schedule);
  }
}

TEST_CASE("Zero-bubble W passes fill the waits behind a slow stage, leaving the gradients the same",
          "[dist][mpi][pipeline]") {
  auto world = dist::world();
  if (world->size() == 1) return;  // one stage waits for nobody
  // ZB-H1's last stage runs F B F B W ...: while its third forward waits for stage 0 (20 ms
  // per forward), the W of the second micro-batch can run first; the plan put it later.
  const dist::PipelineExecutor::Timing timing =
      check_split_step(world, world, Device::cpu(), PipelineSchedule::ZeroBubbleH1, /*slow_first_stage=*/true);
  if (world->rank() == world->size() - 1) CHECK(timing.weights_early >= 1);
  if (world->rank() == 0) CHECK(timing.weights_early == 0);  // it waits for nothing before its W passes
}

TEST_CASE("Zero-bubble schedules on CUDA over NCCL equal the unpipelined model on the CPU",
          "[cuda][dist][nccl][pipeline]") {
  auto world = dist::world();
  if (!test::nccl_ranks_ready(world)) return;
  const Device gpu = dist::rank_cuda_device();
  const dist::CommunicatorPtr nccl = dist::nccl_communicator(world, gpu);
  for (PipelineSchedule schedule : {PipelineSchedule::ZeroBubbleH1, PipelineSchedule::ZeroBubbleV}) {
    check_split_step(world, nccl, gpu, schedule);
  }
}
