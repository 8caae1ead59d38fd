// The checkpoint file layer: safetensors round trips and every way a file can be bad,
// atomic files, manifests (fields, versions) and the directory's commit/latest/keep rules.
#include "dtrain/checkpoint/atomic_file.h"
#include "dtrain/checkpoint/manifest.h"
#include "dtrain/checkpoint/safetensors.h"
#include "dtrain/checkpoint/store.h"
#include "support/test_support.h"

#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <fstream>

using namespace dtrain;
using namespace dtrain::checkpoint;
namespace fs = std::filesystem;

namespace {

NamedTensors sample_tensors() {
  return {{"fc.weight", test::random_tensor({3, 4}, 1)},
          {"fc.bias", test::random_tensor({3}, 2, DType::f64)},
          {"bn.num_batches_tracked", Tensor::scalar(7, {DType::i64})},
          {"half", test::random_tensor({2, 2}, 3).to(DType::f16)},
          {"empty", Tensor::zeros({0, 5})},
          {"empty_inner", Tensor::zeros({3, 0})}};
}

std::vector<std::uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::string file_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A safetensors file built from a header JSON and data bytes, with the length prefix.
std::vector<std::uint8_t> raw_file(const std::string& header, std::size_t data_bytes) {
  std::string out(8, '\0');
  const std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out += header;
  out.append(data_bytes, '\0');
  return to_bytes(out);
}

Manifest sample_manifest() {
  Manifest m;
  m.created = "2026-12-02T00:00:00Z";
  m.model = "mlp";
  m.job = {.strategy = "pipeline",
           .world_size = 4,
           .stages = 2,
           .replicas = 2,
           .servers = 0,
           .mesh = {{"dp_shard", 2}, {"pp", 2}}};
  m.position = {.global_step = 10,
                .epoch = 2,
                .step_in_epoch = 3,
                .updates_per_epoch = 7,
                .epochs = 4,
                .batch_size = 64,
                .data_seed = 1};
  m.files = {{.name = "model.safetensors", .bytes = 100, .xxh3 = "0123456789abcdef", .rank = 0}};
  return m;
}

}  // namespace

TEST_CASE("safetensors files round-trip every dtype, in order, with metadata", "[checkpoint][cpu]") {
  test::TempDir dir;
  const NamedTensors tensors = sample_tensors();
  AtomicFile f(dir / "t.safetensors");
  write_safetensors(f, tensors, {{"format", "pt"}});
  f.commit();
  const SafetensorsFile r = SafetensorsFile::read(dir / "t.safetensors");
  REQUIRE(r.names() ==
          std::vector<std::string>{"fc.weight", "fc.bias", "bn.num_batches_tracked", "half", "empty", "empty_inner"});
  REQUIRE(r.metadata().at("format") == "pt");
  for (const auto& [name, t] : tensors) {
    const Tensor back = r.tensor(name);
    REQUIRE(back.dtype() == t.dtype());
    REQUIRE(back.shape() == t.shape());
    REQUIRE(std::memcmp(back.raw_data(), t.raw_data(), t.nbytes()) == 0);
  }
  // The header is 8-aligned and the file is exactly header + data.
  const std::string bytes = file_text(dir / "t.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  REQUIRE(n % 8 == 0);
  REQUIRE(bytes.size() == 8 + n + 12 * 4 + 3 * 8 + 8 + 4 * 2);
  REQUIRE(f.bytes() == bytes.size());
  REQUIRE_THROWS_WITH(r.tensor("nope"), Catch::Contains("no tensor named 'nope'"));
}

TEST_CASE("safetensors reading names the file and what is wrong", "[checkpoint][cpu]") {
  const auto fails = [](std::vector<std::uint8_t> bytes, const std::string& expect) {
    REQUIRE_THROWS_WITH(SafetensorsFile::parse("bad.safetensors", std::move(bytes)),
                        Catch::Contains("bad.safetensors") && Catch::Contains(expect));
  };
  fails({1, 2, 3}, "too short");
  fails({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, "over the limit");
  auto truncated = raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8);
  truncated.resize(truncated.size() - 20);
  fails(truncated, "truncated");
  fails(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "outside the 4 data bytes");
  fails(raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "needs 12 bytes");
  fails(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12), "trailing bytes");
  fails(
      raw_file(
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
          4),
      "overlap or gap");
  fails(raw_file(R"({"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", 8), "dtype \"C64\"");
  fails(raw_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "unsigned integer");
  fails(raw_file(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0), "does not fit");
  fails(raw_file(R"({"a":{"dtype":"F32"}})", 0), "needs \"dtype\", \"shape\" and \"data_offsets\"");
  fails(raw_file("[1,2]", 0), "must be a JSON object");
  fails(raw_file("{nope", 0), "not valid JSON");
}

TEST_CASE("AtomicFile leaves the target untouched until commit, and reports a failed write", "[checkpoint][cpu]") {
  test::TempDir dir;
  write_file_atomically(dir / "latest", "old\n");
  {
    AtomicFile f(dir / "latest");
    f.write("new\n");
    REQUIRE(file_text(dir / "latest") == "old\n");  // not committed: destroyed, removed
  }
  REQUIRE(file_text(dir / "latest") == "old\n");
  REQUIRE(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 1);
  // A file-size limit stands in for a full disk: the write fails with the system's reason.
  struct rlimit old_limit {};
  getrlimit(RLIMIT_FSIZE, &old_limit);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 4096;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &limit) == 0);
  {
    AtomicFile f(dir / "latest");
    const std::string big(10000, 'x');
    REQUIRE_THROWS_WITH(f.write(big),
                        Catch::Contains("writing") && Catch::Contains("latest") && Catch::Contains("file-size limit"));
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  REQUIRE(file_text(dir / "latest") == "old\n");
  REQUIRE(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 1);
}

TEST_CASE("Checksum is XXH3-64 in hex", "[checkpoint][cpu]") {
  Checksum empty;
  REQUIRE(empty.hex() == "2d06800538d394c2");  // XXH3_64bits("") from the reference implementation
  Checksum a, b;
  a.update("hello ", 6);
  a.update("world", 5);
  b.update("hello world", 11);
  REQUIRE(a.hex() == b.hex());
  REQUIRE(a.hex().size() == 16);
}

TEST_CASE("Manifests round-trip and bad ones are named", "[checkpoint][cpu]") {
  const Manifest m = sample_manifest();
  const Manifest back = Manifest::parse("manifest.json", m.to_json());
  REQUIRE(back.to_json() == m.to_json());
  REQUIRE(back.position.step_in_epoch == 3);
  REQUIRE(back.files.at(0).xxh3 == "0123456789abcdef");
  REQUIRE(back.job.mesh == m.job.mesh);
  REQUIRE(checkpoint::describe_mesh(back.job.mesh) == "dp_shard=2 x pp=2");
  REQUIRE(checkpoint::describe_mesh({}) == "one process");
  // A manifest written before the mesh was recorded has none.
  std::string before = m.to_json();
  const auto mesh_at = before.find("\"mesh\": [");
  REQUIRE(mesh_at != std::string::npos);
  before.erase(mesh_at, before.find(']', mesh_at) + 2 - mesh_at);  // the list and its comma
  REQUIRE(Manifest::parse("m.json", before).job.mesh.empty());
  std::string empty_dim = m.to_json();
  empty_dim.replace(empty_dim.find("\"size\": 2"), 9, "\"size\": 0");
  REQUIRE_THROWS_WITH(Manifest::parse("m.json", empty_dim),
                      Catch::Contains("m.json: job.mesh: dimension \"dp_shard\" of size 0 is impossible"));

  std::string newer = m.to_json();
  newer.replace(newer.find("\"format_version\": 1"), 19, "\"format_version\": 99");
  REQUIRE_THROWS_WITH(Manifest::parse("m.json", newer),
                      Catch::Contains("m.json") && Catch::Contains("version 99") && Catch::Contains("up to 1"));
  std::string missing = m.to_json();
  missing.replace(missing.find("\"world_size\""), 12, "\"world_sise\"");
  REQUIRE_THROWS_WITH(Manifest::parse("m.json", missing), Catch::Contains("missing field \"world_size\""));
  std::string fraction = m.to_json();
  fraction.replace(fraction.find("\"world_size\": 4"), 15, "\"world_size\": 2.5");
  REQUIRE_THROWS_WITH(Manifest::parse("m.json", fraction), Catch::Contains("\"world_size\" must be an integer"));
  std::string escape = m.to_json();
  escape.replace(escape.find("model.safetensors"), 17, "../../etc/passwd");
  REQUIRE_THROWS_WITH(Manifest::parse("m.json", escape), Catch::Contains("not a plain file name"));
  REQUIRE_THROWS_WITH(Manifest::parse("m.json", "{"), Catch::Contains("not valid JSON"));

  RankRecord r{.rank = 1, .rng_seed = 5, .rng_offset = 1u << 20, .epoch_sums = {1.5, 2}, .files = {}, .error = ""};
  const RankRecord r2 = RankRecord::parse("rank-1.json", r.to_json());
  REQUIRE(r2.rng_offset == r.rng_offset);
  REQUIRE(r2.epoch_sums == r.epoch_sums);
  REQUIRE(r2.error.empty());
}

TEST_CASE("CheckpointStore commits whole checkpoints, points latest at them and keeps the newest",
          "[checkpoint][cpu]") {
  test::TempDir dir;
  const CheckpointStore store(dir / "ckpt");
  REQUIRE_FALSE(store.latest());
  std::atomic<bool> cancel{false};
  for (std::int64_t step : {10, 20, 30}) {
    const fs::path tmp = store.incomplete(step);
    fs::create_directories(tmp);
    write_file_atomically(
        tmp / "rank-0.json",
        RankRecord{.rank = 0, .rng_seed = 0, .rng_offset = 0, .epoch_sums = {}, .files = {}, .error = ""}.to_json());
    REQUIRE(store.wait_for_ranks(step, 1, cancel).size() == 1);
    Manifest m = sample_manifest();
    m.position.global_step = step;
    m.files.clear();
    store.commit(step, m, /*keep=*/2);
  }
  REQUIRE(store.latest() == store.final_path(30));
  REQUIRE(store.list() == std::vector<fs::path>{store.final_path(20), store.final_path(30)});
  REQUIRE(file_text(dir / "ckpt" / "latest") == "step-000000030\n");
  // A crash between the rename and `latest`: the newest whole checkpoint is found anyway;
  // an incomplete one is never taken, and is cleared.
  fs::create_directories(store.incomplete(40));
  write_file_atomically(dir / "ckpt" / "latest", "step-000000099\n");
  REQUIRE(store.latest() == store.final_path(30));
  store.remove_incomplete();
  REQUIRE_FALSE(fs::exists(store.incomplete(40)));
  // A rank whose save failed is named; a missing rank is waited for until cancelled.
  fs::create_directories(store.incomplete(50));
  write_file_atomically(
      store.incomplete(50) / "rank-1.json",
      RankRecord{.rank = 1, .rng_seed = 0, .rng_offset = 0, .epoch_sums = {}, .files = {}, .error = "disk full"}
          .to_json());
  REQUIRE_THROWS_WITH(store.wait_for_ranks(50, 2, cancel), Catch::Contains("rank 1 could not save: disk full"));
  cancel = true;
  REQUIRE_THROWS_WITH(store.wait_for_ranks(60, 1, cancel), Catch::Contains("abandoned"));
  // A rank that left the job (a lost parameter-server worker) is not waited for.
  cancel = false;
  fs::create_directories(store.incomplete(70));
  for (int r : {0, 2}) {
    write_file_atomically(
        store.incomplete(70) / fmt::format("rank-{}.json", r),
        RankRecord{.rank = r, .rng_seed = 0, .rng_offset = 0, .epoch_sums = {}, .files = {}, .error = ""}.to_json());
  }
  const std::vector<RankRecord> present = store.wait_for_ranks(70, 3, cancel, {1});
  REQUIRE(present.size() == 2);
  CHECK(present[0].rank == 0);
  CHECK(present[1].rank == 2);
}

TEST_CASE("OpenCheckpoint names a missing, truncated or corrupt file", "[checkpoint][cpu]") {
  test::TempDir dir;
  const fs::path c = dir / "step-000000001";
  fs::create_directories(c);
  AtomicFile f(c / "model.safetensors");
  write_safetensors(f, sample_tensors());
  f.commit();
  Manifest m = sample_manifest();
  m.files = {{.name = "model.safetensors", .bytes = f.bytes(), .xxh3 = f.checksum(), .rank = 0}};
  write_file_atomically(c / "manifest.json", m.to_json());
  const OpenCheckpoint ok = OpenCheckpoint::open(c);
  REQUIRE(SafetensorsFile::parse("m", ok.read_verified(ok.manifest.files[0])).names().size() == 6);

  // Same size, one byte flipped: only the checksum sees it.
  std::string bytes = file_text(c / "model.safetensors");
  bytes[bytes.size() - 9] ^= 0x40;
  test::write_file(c / "model.safetensors", bytes);
  REQUIRE_THROWS_WITH(ok.read_verified(ok.manifest.files[0]),
                      Catch::Contains("model.safetensors has checksum") && Catch::Contains("corrupt"));
  test::write_file(c / "model.safetensors", bytes.substr(0, 100));
  REQUIRE_THROWS_WITH(OpenCheckpoint::open(c), Catch::Contains("model.safetensors has 100 bytes, the manifest says"));
  fs::remove(c / "model.safetensors");
  REQUIRE_THROWS_WITH(OpenCheckpoint::open(c),
                      Catch::Contains("model.safetensors is listed in the manifest but missing"));
  fs::remove(c / "manifest.json");
  REQUIRE_THROWS_WITH(OpenCheckpoint::open(c), Catch::Contains("no manifest.json"));
}
