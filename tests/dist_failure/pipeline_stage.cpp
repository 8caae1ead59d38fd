// A two-stage pipeline whose last stage fails after the first step, while stage 0 runs
// the second:
//   pipeline_stage          rank 1 dies (exit code 3);
//   pipeline_stage --stall  rank 1 stays alive but stops taking part (sleeps 120 s).
// Stage 0 then waits for a gradient that never comes. It must not hang: its watchdog
// (DTRAIN_TIMEOUT) names the receive and the stage it waits for and aborts the job. Run by
// ctest (dist.pipeline_dead_stage, dist.pipeline_stalled_stage) under an mpirun that does
// not kill the survivors when a rank exits non-zero.
#include "dtrain/autograd/functions.h"
#include "dtrain/dist/pipeline/pipeline_strategy.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/sgd.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

int main(int argc, char** argv) {
  using namespace dtrain;
  const bool stall = argc > 1 && std::strcmp(argv[1], "--stall") == 0;
  auto world = dist::world();
  auto strategy = std::make_shared<dist::PipelineStrategy>(world, Device::cpu(),
                                                           dist::PipelineOptions{.stages = 2, .micro_batches = 2});
  auto stage = strategy->prepare(nn::mlp(4, {8, 8}, 3));
  optim::SGD sgd(stage->parameters(), {.lr = 0.1});
  const dist::MicroBatch batch{Tensor::ones({8, 4}), Tensor::zeros({8}, {DType::i64})};
  const dist::StepConfig config{.loss = [](const Variable& out, const Tensor& y) { return cross_entropy(out, y); }};
  for (int step = 0; step < 2; ++step) {
    if (step == 1 && world->rank() == 1) {
      if (!stall) std::_Exit(3);  // dies as a crash would: no exit handlers
      std::this_thread::sleep_for(std::chrono::seconds(120));
    }
    strategy->train_step(std::span(&batch, 1), sgd, config);
  }
  return 0;
}
