// Activation memory per rank under tensor parallelism, with and without sequence parallelism
// (Korthikanti et al. 2022's claim: plain tensor parallelism keeps the norms', dropouts' and
// residuals' activations whole on every rank, sequence parallelism splits them too). Run it
// under mpirun -np T (the whole world is the tensor-parallel group; -np 1 is one process):
// the GPT (train_gpt's flags) runs forward, the vocabulary-parallel loss and backward on one
// batch; a rank's activation memory is the peak of its CPU tensors during that pass minus
// what it held before (parameters, gradients from an earlier pass), from the block cache's
// counts (memory_stats.h). Prints one line per setting and, with --json, a JSON line.
//   mpirun -np 2 build/release/bench/bench_tp_memory --layers 4 --heads 4 --embd 128 --block-size 64 --batch 12
#include "dtrain/comm/communicator.h"
#include "dtrain/dist/tensor_parallel/gpt_plan.h"
#include "dtrain/layers/gpt.h"
#include "dtrain/tensor/memory_stats.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>

using namespace dtrain;

namespace {

struct Measured {
  double activation_mb = 0;  // the largest rank's
  double parameter_mb = 0;   // this rank's parameters
};

Measured measure(const nn::GptConfig& config, std::int64_t batch, const dist::CommunicatorPtr& world, bool sp) {
  manual_seed(1);
  auto model = nn::gpt(config);
  std::shared_ptr<dist::TensorParallel> tp;
  if (world->size() > 1)
    tp = dist::parallelize(*model, world, dist::gpt_tensor_parallel_plan(config), {.sequence_parallel = sp});
  const auto loss_fn = tp ? tp->loss() : std::function<Variable(const Variable&, const Tensor&)>(nn::lm_loss);
  std::vector<double> ids;
  for (std::int64_t i = 0; i < batch * config.block_size; ++i)
    ids.push_back(static_cast<double>((i * 31) % config.vocab_size));
  const Tensor tokens = Tensor::from_vector(ids, {batch, config.block_size}).to(DType::i64);
  // One pass first, so that the gradients exist and the caches are warm.
  for (int pass = 0; pass < 2; ++pass) {
    model->zero_grad();
    const std::size_t before = memory_stats(Device::cpu()).in_use_bytes;
    reset_peak_memory(Device::cpu());
    Variable loss = loss_fn((*model)(Variable(tokens)), tokens);
    loss.backward();
    const std::size_t peak = memory_stats(Device::cpu()).peak_bytes;
    if (pass == 1) {
      Tensor t = Tensor::full({1}, static_cast<double>(peak - before), {DType::f64});
      world->all_reduce(t, ReduceOp::Max);
      double params = 0;
      for (const Variable& p : model->parameters()) params += static_cast<double>(p.numel()) * 4;
      return {t.item() / 1e6, params / 1e6};
    }
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Activation memory per rank under tensor and sequence parallelism", "bench_tp_memory"};
  nn::GptConfig config{.vocab_size = 256, .block_size = 64, .layers = 4, .heads = 4, .embd = 128, .bias = false};
  std::int64_t batch = 12;
  bool json = false;
  app.add_option("--layers", config.layers)->capture_default_str();
  app.add_option("--heads", config.heads)->capture_default_str();
  app.add_option("--embd", config.embd)->capture_default_str();
  app.add_option("--block-size", config.block_size)->capture_default_str();
  app.add_option("--vocab", config.vocab_size)->capture_default_str();
  app.add_option("--batch", batch, "sequences per pass")->capture_default_str();
  app.add_flag("--json", json, "also a JSON line per setting");
  CLI11_PARSE(app, argc, argv);
  try {
    config.validate();
    auto world = dist::world();
    const int tp = world->size();
    for (const bool sp : tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
      const Measured m = measure(config, batch, world, sp);
      if (world->rank() != 0) continue;
      fmt::print("tp={}{}: activation memory {:.2f} MB per rank (largest rank), parameters {:.2f} MB per rank\n", tp,
                 sp ? " sp" : "", m.activation_mb, m.parameter_mb);
      if (json)
        fmt::print(
            "{{\"tp\": {}, \"sp\": {}, \"activation_mb\": {:.3f}, \"parameter_mb\": {:.3f}, \"config\": \"{}\", "
            "\"batch\": {}}}\n",
            tp, sp, m.activation_mb, m.parameter_mb, config.describe(), batch);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_tp_memory: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
