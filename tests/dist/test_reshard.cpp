// The checkpoint contract is the mesh: a checkpoint records the mesh it was saved on
// (manifest job.mesh) and its tensors by name and range, and a restore onto another mesh
// reslices by that record. Each saved layout below trains one epoch of 6 Adam updates
// (72 rows, batches of 12, ~100-byte buckets so that parameters straddle the shards'
// chunks) and saves; the checkpoint then resumes on three other meshes for a second
// epoch, and each resumed run must end with the test loss of plain data parallelism
// trained both epochs without a stop, within 1e-5 relative (f32 sums in other orders).
// At np 2 the saved layouts are pp=2 under ZeRO-1, -2 and -3, and ZeRO-3; at np 4 pp=2,dp=2
// under ZeRO-2, hybrid zero=2,shard=2 and ZeRO-3. The targets: dp over the world, one
// process (every rank alone, at once), and a third mesh (zero=3 on 3 of the 4 ranks at
// np 4; at np 2 ZeRO-3 for a pipeline's checkpoint, pp=2,zero=2 for ZeRO-3's). A saved
// mesh with a dimension this dtrain cannot reslice is refused naming both meshes.
#include "dtrain/comm/communicator.h"
#include "dtrain/dist/strategy/strategy_factory.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/adam.h"
#include "dtrain/train/trainer.h"
#include "sharded_test_helpers.h"
#include "support/test_support.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace dtrain;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

// `spec` with ~100-byte buckets (at zero=3 the gather units are the buckets): uneven slices.
std::string tiny(const std::string& spec) {
  return spec + (spec.find("zero=3") != std::string::npos ? ",gather_mb=0.0001" : ",bucket_mb=0.0001");
}

// The test loss after `epochs` epochs under `spec` over `world`: saving at each epoch's end
// into `dir` when given, resuming from checkpoint `resume` when given. A resumed run must
// train the second epoch alone (else a resume that did not happen would pass: two epochs
// from the start are the uninterrupted run).
double train_run(const std::string& spec, const dist::CommunicatorPtr& world, const fs::path& dir,
                 const fs::path& resume, int epochs) {
  auto strategy = dist::make_strategy(spec, world, Device::cpu());
  manual_seed(7);
  strategy->prepare(nn::mlp(5, {7, 6}, 3));
  optim::Adam adam(strategy->module().parameters(), {.lr = 0.05});
  const auto data = test::three_class_data(72);  // 6 updates of 12 per epoch
  train::TrainerOptions options{.epochs = epochs, .verbose = false};
  options.checkpoint = {.dir = dir, .async = false, .resume = resume.string()};
  train::Trainer trainer(strategy, {.train = data, .test = data, .batch_size = 12, .seed = 4}, options);
  const train::FitResult r = trainer.fit(adam);
  REQUIRE(r.epochs.size() == (resume.empty() ? static_cast<std::size_t>(epochs) : 1u));
  return r.epochs.back().test_loss;
}

// The checkpoint `saved` resumed under `spec` over the ranks of `world` whose `member` is
// true (the others call only the split), for the second epoch: its test loss, or NaN on
// the ranks left out.
double resumed(const std::string& spec, const dist::CommunicatorPtr& world, bool member, const fs::path& saved) {
  const dist::CommunicatorPtr group = world->split(member ? 0 : 1, world->rank());
  if (!member) return std::nan("");
  return train_run(spec, group, {}, saved, 2);
}

}  // namespace

TEST_CASE("A checkpoint resumes on three other meshes with the uninterrupted run's test loss",
          "[dist][mpi][checkpoint][composition]") {
  auto world = dist::world();
  const int W = world->size(), r = world->rank();
  if (W != 2 && W != 4) {
    SUCCEED("resharding runs at 2 or 4 ranks");
    return;
  }
  const double whole = train_run("dp", world, {}, {}, 2);
  std::vector<std::string> saved_layouts;
  if (W == 2) saved_layouts = {"pp=2,micro=2,zero=1", "pp=2,micro=2,zero=2", "pp=2,micro=2,zero=3", "zero=3"};
  else saved_layouts = {"pp=2,dp=2,micro=2,zero=2", "zero=2,shard=2", "zero=3"};
  for (const std::string& layout : saved_layouts) {
    const fs::path dir = test::shared_temp_dir(*world, "dtrain_reshard");
    const double first = train_run(tiny(layout), world, dir, {}, 1);
    REQUIRE(std::isfinite(first));
    const fs::path saved = test::first_checkpoint(dir);
    REQUIRE(!saved.empty());
    std::ifstream manifest(saved / "manifest.json");
    std::stringstream text;
    text << manifest.rdbuf();
    INFO(layout << " at np " << W << " saved " << saved << ": " << text.str());
    CHECK_THAT(text.str(), Contains("\"mesh\""));

    // At np 2 the third mesh is the other family (a pipeline's checkpoint into ZeRO-3 and
    // back); at np 4 ZeRO-3 on 3 ranks, a size none of the layouts had.
    const bool pipeline = layout.rfind("pp=", 0) == 0;
    const std::string third = W == 4 || pipeline ? "zero=3" : "pp=2,micro=2,zero=2";
    const double on_dp = resumed(tiny("dp"), world, true, saved);
    const double one_process = train_run("dp", world->split(r, 0), {}, saved, 2);
    const double on_third = resumed(tiny(third), world, W == 2 || r < 3, saved);
    INFO("uninterrupted dp: " << whole << "; resumed on dp " << on_dp << ", one process " << one_process << ", "
                              << third << " " << on_third);
    CHECK(std::abs(on_dp - whole) <= 1e-5 * whole);
    CHECK(std::abs(one_process - whole) <= 1e-5 * whole);
    if (W == 2 || r < 3) CHECK(std::abs(on_third - whole) <= 1e-5 * whole);
    world->barrier();
    if (r == 0) fs::remove_all(dir);
  }
}

TEST_CASE("A checkpoint saved on a mesh with a dimension dtrain cannot reslice is refused naming both meshes",
          "[dist][mpi][checkpoint]") {
  auto world = dist::world();
  const fs::path dir = test::shared_temp_dir(*world, "dtrain_reshard_refused");
  train_run("dp", world, dir, {}, 1);
  const fs::path saved = test::first_checkpoint(dir);
  REQUIRE(!saved.empty());
  world->barrier();
  if (world->rank() == 0) {
    // As a newer dtrain with context parallelism would record it.
    std::ifstream in(saved / "manifest.json");
    std::stringstream text;
    text << in.rdbuf();
    std::string manifest = text.str();
    const std::string key = "\"mesh\": [";
    const auto at = manifest.find(key);
    REQUIRE(at != std::string::npos);
    manifest.insert(at + key.size(), R"({"name": "cp", "size": 2})" + std::string(world->size() > 1 ? ", " : ""));
    std::ofstream(saved / "manifest.json") << manifest;
  }
  world->barrier();
  const std::string here = world->size() > 1 ? fmt::format("dp_replicate={}", world->size()) : "one process";
  const std::string there = world->size() > 1 ? fmt::format("cp=2 x dp_replicate={}", world->size()) : "cp=2";
  CHECK_THAT(
      test::error_of([&] { train_run("dp", world, {}, saved, 2); }),
      Contains("was saved on mesh " + there + ", which this job's mesh " + here + " cannot map: dimension 'cp'"));
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}
