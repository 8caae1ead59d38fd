// DeviceMesh at any world size (1, 2 and 4 ranks): coordinates, the members of each
// dimension's group (gathered over the group and compared with the ranks the layout names),
// role blocks, and shapes that do not fit the job, refused on every rank with the shape.
#include "dtrain/dist/strategy/device_mesh.h"
#include "support/test_support.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

// The world ranks of `group`'s members, in the group's rank order.
std::vector<std::int64_t> members(const dist::CommunicatorPtr& group, int world_rank) {
  Tensor out = Tensor::empty({group->size()}, {DType::i64});
  group->all_gather(Tensor::full({}, world_rank, {DType::i64}), out);
  return out.to_vector<std::int64_t>();
}

}  // namespace

TEST_CASE("device mesh: one dimension is the world", "[cpu][dist]") {
  auto world = dist::world();
  dist::DeviceMesh mesh(world, {{"dp", world->size()}});
  CHECK(mesh.role() == "train");
  CHECK(mesh.size("dp") == world->size());
  CHECK(mesh.coordinate("dp") == world->rank());
  CHECK(mesh.group("dp")->rank() == world->rank());
  CHECK(mesh.has("dp"));
  CHECK_FALSE(mesh.has("pp"));
  CHECK_THROWS_WITH(mesh.group("pp"), Contains("has no dimension 'pp'"));
  std::vector<std::int64_t> all(static_cast<std::size_t>(world->size()));
  for (int r = 0; r < world->size(); ++r) all[static_cast<std::size_t>(r)] = r;
  CHECK(members(mesh.group("dp"), world->rank()) == all);
}

TEST_CASE("device mesh: a 2-D grid is row-major, each group ordered along its dimension", "[cpu][dist]") {
  auto world = dist::world();
  if (world->size() % 2 != 0) {  // one rank: the grid does not fit (np2 and np4 run the rest)
    CHECK_THROWS_WITH(dist::DeviceMesh(world, {{"dp", 1}, {"pp", 2}}), Contains("holds 2 ranks, the job has 1"));
    return;
  }
  const int pp = 2, dp = world->size() / 2;
  dist::DeviceMesh mesh(world, {{"dp", dp}, {"pp", pp}});
  const int r = world->rank();
  CHECK(mesh.describe() == fmt::format("dp={} x pp=2", dp));
  CHECK(mesh.coordinate("pp") == r % pp);
  CHECK(mesh.coordinate("dp") == r / pp);
  // The stages of this replica are neighbouring ranks; the replicas of this stage are pp apart.
  std::vector<std::int64_t> pipeline, replicas;
  for (int s = 0; s < pp; ++s) pipeline.push_back((r / pp) * pp + s);
  for (int d = 0; d < dp; ++d) replicas.push_back(d * pp + r % pp);
  CHECK(members(mesh.group("pp"), r) == pipeline);
  CHECK(members(mesh.group("dp"), r) == replicas);
  CHECK(mesh.group("pp")->rank() == mesh.coordinate("pp"));
  CHECK(mesh.group("dp")->rank() == mesh.coordinate("dp"));
}

TEST_CASE("device mesh: role blocks of consecutive ranks, each with its own grid", "[cpu][dist]") {
  auto world = dist::world();
  if (world->size() < 2) {  // one rank: no room for a worker beside the server (np2 and np4 run the rest)
    CHECK_THROWS_WITH(
        dist::DeviceMesh(world, std::vector<dist::MeshBlock>{{"worker", {{"dp", 0}}}, {"ps", {{"ps", 1}}}}),
        Contains("'dp' must have size >= 1"));
    return;
  }
  const int workers = world->size() - 1;
  dist::DeviceMesh mesh(world, {{"worker", {{"dp", workers}}}, {"ps", {{"ps", 1}}}});
  const int r = world->rank();
  CHECK(mesh.role_size("worker") == workers);
  CHECK(mesh.role_size("ps") == 1);
  CHECK(mesh.role_size("evaluator") == 0);
  CHECK(mesh.role_first_rank("ps") == workers);
  CHECK(mesh.describe() == fmt::format("worker[dp={}] + ps[ps=1]", workers));
  if (r < workers) {
    CHECK(mesh.role() == "worker");
    CHECK(mesh.coordinate("dp") == r);
    CHECK_FALSE(mesh.has("ps"));
    std::vector<std::int64_t> all(static_cast<std::size_t>(workers));
    for (int w = 0; w < workers; ++w) all[static_cast<std::size_t>(w)] = w;
    CHECK(members(mesh.group("dp"), r) == all);
    CHECK(mesh.role_group()->size() == workers);
  } else {
    CHECK(mesh.role() == "ps");
    CHECK(mesh.coordinate("ps") == 0);
    CHECK(members(mesh.group("ps"), r) == std::vector<std::int64_t>{r});
  }
}

TEST_CASE("device mesh: shapes that do not fit are refused with the shape", "[cpu][dist]") {
  auto world = dist::world();
  const int n = world->size();
  CHECK_THROWS_WITH(
      dist::DeviceMesh(world, {{"dp", n}, {"pp", 2}}),
      Contains(fmt::format("device mesh dp={} x pp=2", n)) && Contains("the job has " + std::to_string(n)));
  CHECK_THROWS_WITH(dist::DeviceMesh(world, {{"dp", n}, {"dp", 1}}), Contains("dimension 'dp' appears twice"));
  CHECK_THROWS_WITH(dist::DeviceMesh(world, {{"DP", n}}), Contains("dimension 'DP' must be a lowercase word"));
  CHECK_THROWS_WITH(dist::DeviceMesh(world, {{"dp", 0}}), Contains("'dp' must have size >= 1"));
  CHECK_THROWS_WITH(dist::DeviceMesh(world, std::vector<dist::MeshBlock>{{"worker", {{"dp", n}}}, {"ps", {{"ps", 1}}}}),
                    Contains(fmt::format("worker[dp={}] + ps[ps=1] holds {} ranks", n, n + 1)));
  // The world is still usable: nothing collective ran before the checks.
  Tensor t = Tensor::full({1}, 1.0);
  world->all_reduce(t);
  CHECK(t.item() == n);
}

TEST_CASE("device mesh: a flattened dimension joins others, row-major, beside them", "[cpu][dist]") {
  // dp_replicate x dp_shard x pp with dp = dp_replicate * dp_shard: at 4 ranks 2 x 2 x 1
  // (the shard groups {0,1} and {2,3}), at 2 ranks 1 x 1 x 2 (dp is each rank alone), at 1
  // rank 1 x 1 x 1.
  auto world = dist::world();
  const int n = world->size(), r = world->rank();
  const int replicate = n == 4 ? 2 : 1, shard = n == 4 ? 2 : 1, pp = n / (replicate * shard);
  dist::DeviceMesh mesh(world, {{"dp_replicate", replicate}, {"dp_shard", shard}, {"pp", pp}},
                        {{"dp", {"dp_replicate", "dp_shard"}}});
  CHECK(mesh.size("dp") == replicate * shard);
  CHECK(mesh.coordinate("dp") == r / pp);
  CHECK(mesh.group("dp")->rank() == mesh.coordinate("dp"));
  CHECK(mesh.describe() == fmt::format("dp_replicate={} x dp_shard={} x pp={}", replicate, shard, pp));
  std::vector<std::int64_t> dp;  // the ranks of this rank's stage, in replica order
  for (int q = r % pp; q < n; q += pp) dp.push_back(q);
  CHECK(members(mesh.group("dp"), r) == dp);
  if (n == 4) CHECK(members(mesh.group("dp_shard"), r) == std::vector<std::int64_t>{r / 2 * 2, r / 2 * 2 + 1});
  CHECK_THROWS_WITH(dist::DeviceMesh(world, {{"dp_replicate", replicate}, {"dp_shard", shard}, {"pp", pp}},
                                     {{"dp", {"dp_shard", "dp_replicate"}}}),
                    Contains("flattened dimension 'dp' must join distinct dimensions of the mesh in its order"));
  CHECK_THROWS_WITH(
      dist::DeviceMesh(world, {{"dp_replicate", replicate}, {"dp_shard", shard}, {"pp", pp}}, {{"pp", {"dp_shard"}}}),
      Contains("flattened dimension 'pp' must be a new lowercase word"));
}
