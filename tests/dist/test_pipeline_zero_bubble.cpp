// The zero-bubble schedules' split backward inside the pipeline's engine, at any world size
// (K = W stages): at the first W pass of each chunk (after at least one of its B passes)
// none of the chunk's weight matrices has a gradient, so B left them to W (its biases have
// theirs: B computes the 1-D parameters'); after the step every gradient equals the
// unpipelined model's (1e-5 relative), so W added all of them. On GPUs
// over NCCL ([nccl]: ctest's dist.np2_nccl, scripts/gpu-check.sh --multi-gpu) the same. The
// schedules' equivalence through PipelineStrategy is in test_pipeline.cpp.
#include "dist/pipeline/pipeline_executor.h"
#include "dtrain/autograd/functions.h"
#include "dtrain/dist/comm/nccl.h"
#include "dtrain/layers/activation.h"
#include "dtrain/layers/linear.h"
#include "dtrain/layers/sequential.h"
#include "nccl_ranks.h"
#include "support/test_support.h"

using namespace dtrain;
using dist::PipelineSchedule;

namespace {

constexpr std::int64_t kWidth = 5;
constexpr int kMicro = 4;

// Virtual stage c's chunk: Linear then Tanh, the same on every rank.
nn::ModulePtr make_chunk(int c) {
  manual_seed(40 + static_cast<std::uint64_t>(c));
  return std::make_shared<nn::Sequential>(
      std::vector<nn::ModulePtr>{std::make_shared<nn::Linear>(kWidth, kWidth), std::make_shared<nn::Tanh>()});
}

Variable micro_loss(const Variable& out) { return mul(sum(mul(out, out)), 0.5); }

// One step of `schedule` over the world's ranks, the chunks on `device` and their tensors
// through `tensor_comm`, checked as the file's comment says. CHECKs, not REQUIREs: every
// rank must reach the next run.
void check_split_step(const dist::CommunicatorPtr& world, const dist::CommunicatorPtr& tensor_comm, Device device,
                      PipelineSchedule schedule) {
  INFO(dist::schedule_name(schedule) << " on " << device.str());
  const int K = world->size(), V = dist::fixed_virtual_stages(schedule);
  const dist::PipelineShape shape{K, V, kMicro};
  std::vector<Tensor> inputs;
  for (int m = 0; m < kMicro; ++m)
    inputs.push_back(test::random_tensor({3, kWidth}, 60 + static_cast<std::uint64_t>(m)));
  std::vector<nn::ModulePtr> chunks;
  for (int v = 0; v < V; ++v) {
    chunks.push_back(make_chunk(dist::virtual_stage_of(schedule, shape, world->rank(), v)));
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
      // After a B, before any W: the biases have their gradient, the matrices none.
      CHECK(input_passes[v] >= 1);
      for (const Variable& p : chunks[v]->parameters()) CHECK(p.has_grad() == (p.dim() == 1));
    }
    CHECK(last == (weight_passes[v] == kMicro));
  };
  std::vector<Tensor> on_device;
  for (const Tensor& x : inputs) on_device.push_back(x.to(device));
  executor.run(
      on_device, /*train=*/true, std::nullopt, [](const Variable& out, int, bool) { return micro_loss(out); },
      before_gradients);
  for (int v = 0; v < V; ++v) {
    CHECK(weight_passes[static_cast<std::size_t>(v)] == kMicro);
    CHECK(input_passes[static_cast<std::size_t>(v)] == kMicro);
  }
  // The reference: every chunk in order in this process on the CPU, the micro-batches'
  // gradients summed.
  std::vector<nn::ModulePtr> whole;
  for (int c = 0; c < K * V; ++c) whole.push_back(make_chunk(c));
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
}

}  // namespace

TEST_CASE("Zero-bubble W passes add the weight gradients that B passes leave unset", "[dist][mpi][pipeline]") {
  auto world = dist::world();
  for (PipelineSchedule schedule : {PipelineSchedule::ZeroBubbleH1, PipelineSchedule::ZeroBubbleV}) {
    check_split_step(world, world, Device::cpu(), schedule);
  }
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
