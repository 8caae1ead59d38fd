#include "dtrain/checkpoint/manifest.h"

#include "dtrain/core/error.h"

#include <nlohmann/json.hpp>

#include <limits>
#include <type_traits>
#include <utility>

namespace dtrain::checkpoint {

namespace {

using nlohmann::json;

// Reads field `key` of `object` as T, naming the file and the field when it is missing or
// of another type.
template <class T>
T field(const std::string& origin, const json& object, const char* key) {
  DTRAIN_CHECK(object.is_object() && object.contains(key), "{}: missing field \"{}\"", origin, key);
  const json& v = object.at(key);
  if constexpr (std::is_integral_v<T>) {
    // Integers only, in T's range: a float (1e10) or an out-of-range count would convert
    // silently (or undefinedly) otherwise.
    bool fits = false;
    if (v.is_number_unsigned()) {
      fits = std::cmp_less_equal(v.get<std::uint64_t>(), std::numeric_limits<T>::max());
    } else if (v.is_number_integer()) {
      const std::int64_t x = v.get<std::int64_t>();
      fits = std::cmp_greater_equal(x, std::numeric_limits<T>::min()) &&
             std::cmp_less_equal(x, std::numeric_limits<T>::max());
    }
    DTRAIN_CHECK(fits, "{}: field \"{}\" must be an integer in [{}, {}], got {}", origin, key,
                 std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), v.dump());
    return v.is_number_unsigned() ? static_cast<T>(v.get<std::uint64_t>()) : static_cast<T>(v.get<std::int64_t>());
  } else {
    try {
      return v.get<T>();
    } catch (const json::exception&) {
      DTRAIN_FAIL("{}: field \"{}\" has the wrong type ({})", origin, key, v.dump());
    }
  }
}

json files_json(const std::vector<FileRecord>& files) {
  json out = json::array();
  for (const FileRecord& f : files)
    out.push_back({{"name", f.name}, {"bytes", f.bytes}, {"xxh3", f.xxh3}, {"rank", f.rank}});
  return out;
}

std::vector<FileRecord> parse_files(const std::string& origin, const json& j) {
  DTRAIN_CHECK(j.is_array(), "{}: \"files\" must be an array", origin);
  std::vector<FileRecord> out;
  for (const json& f : j) {
    FileRecord r{.name = field<std::string>(origin, f, "name"),
                 .bytes = field<std::uint64_t>(origin, f, "bytes"),
                 .xxh3 = field<std::string>(origin, f, "xxh3"),
                 .rank = field<int>(origin, f, "rank")};
    // A name is a plain file of the checkpoint directory: never a path out of it.
    DTRAIN_CHECK(!r.name.empty() && r.name.find('/') == std::string::npos && r.name != "." && r.name != "..",
                 "{}: file name \"{}\" is not a plain file name", origin, r.name);
    DTRAIN_CHECK(r.xxh3.size() == 16, "{}: file {}: checksum \"{}\" is not 16 hex digits", origin, r.name, r.xxh3);
    out.push_back(std::move(r));
  }
  return out;
}

json mesh_json(const std::vector<MeshAxis>& mesh) {
  json out = json::array();
  for (const MeshAxis& a : mesh) out.push_back({{"name", a.name}, {"size", a.size}});
  return out;
}

std::vector<MeshAxis> parse_mesh(const std::string& origin, const json& job) {
  if (!job.is_object() || !job.contains("mesh")) return {};  // written before the mesh was recorded
  const json& j = job.at("mesh");
  DTRAIN_CHECK(j.is_array(), "{}: \"job.mesh\" must be an array of {{\"name\", \"size\"}}", origin);
  std::vector<MeshAxis> out;
  for (const json& a : j) {
    MeshAxis axis{.name = field<std::string>(origin, a, "name"), .size = field<int>(origin, a, "size")};
    DTRAIN_CHECK(!axis.name.empty() && axis.size >= 1, "{}: job.mesh: dimension \"{}\" of size {} is impossible",
                 origin, axis.name, axis.size);
    out.push_back(std::move(axis));
  }
  return out;
}

json parse_json(const std::string& origin, const std::string& text) {
  try {
    json j = json::parse(text);
    DTRAIN_CHECK(j.is_object(), "{}: expected a JSON object", origin);
    return j;
  } catch (const json::exception& e) {
    DTRAIN_FAIL("{}: not valid JSON: {}", origin, e.what());
  }
}

}  // namespace

std::string describe_mesh(const std::vector<MeshAxis>& mesh) {
  if (mesh.empty()) return "one process";
  std::string out;
  for (const MeshAxis& a : mesh) out += (out.empty() ? "" : " x ") + a.name + "=" + std::to_string(a.size);
  return out;
}

std::string Manifest::to_json() const {
  json j = {{"format_version", format_version},
            {"created", created},
            {"model", model},
            {"job",
             {{"strategy", job.strategy},
              {"world_size", job.world_size},
              {"stages", job.stages},
              {"replicas", job.replicas},
              {"servers", job.servers},
              {"mesh", mesh_json(job.mesh)}}},
            {"position",
             {{"global_step", position.global_step},
              {"epoch", position.epoch},
              {"step_in_epoch", position.step_in_epoch},
              {"updates_per_epoch", position.updates_per_epoch},
              {"epochs", position.epochs},
              {"batch_size", position.batch_size},
              {"data_seed", position.data_seed}}},
            {"files", files_json(files)}};
  return j.dump(2) + "\n";
}

Manifest Manifest::parse(const std::string& origin, const std::string& text) {
  const json j = parse_json(origin, text);
  Manifest m;
  m.format_version = field<int>(origin, j, "format_version");
  DTRAIN_CHECK(m.format_version >= 1, "{}: format_version {} is not a version", origin, m.format_version);
  DTRAIN_CHECK(m.format_version <= kFormatVersion,
               "{}: written in checkpoint format version {}, but this dtrain reads versions up to {} (a newer dtrain "
               "wrote it)",
               origin, m.format_version, kFormatVersion);
  m.created = field<std::string>(origin, j, "created");
  m.model = field<std::string>(origin, j, "model");
  const json& job = j.contains("job") ? j["job"] : json();
  m.job = {.strategy = field<std::string>(origin, job, "strategy"),
           .world_size = field<int>(origin, job, "world_size"),
           .stages = field<int>(origin, job, "stages"),
           .replicas = field<int>(origin, job, "replicas"),
           .servers = field<int>(origin, job, "servers"),
           .mesh = parse_mesh(origin, job)};
  DTRAIN_CHECK(m.job.world_size >= 1 && m.job.stages >= 1 && m.job.replicas >= 1 && m.job.servers >= 0,
               "{}: the job's shape (world_size {}, stages {}, replicas {}, servers {}) is impossible", origin,
               m.job.world_size, m.job.stages, m.job.replicas, m.job.servers);
  const json& p = j.contains("position") ? j["position"] : json();
  m.position = {.global_step = field<std::int64_t>(origin, p, "global_step"),
                .epoch = field<int>(origin, p, "epoch"),
                .step_in_epoch = field<std::int64_t>(origin, p, "step_in_epoch"),
                .updates_per_epoch = field<std::int64_t>(origin, p, "updates_per_epoch"),
                .epochs = field<int>(origin, p, "epochs"),
                .batch_size = field<std::int64_t>(origin, p, "batch_size"),
                .data_seed = field<std::uint64_t>(origin, p, "data_seed")};
  const TrainingPosition& q = m.position;
  DTRAIN_CHECK(q.global_step >= 0 && q.epoch >= 1 && q.step_in_epoch >= 0 && q.updates_per_epoch >= 1 &&
                   q.step_in_epoch <= q.updates_per_epoch && q.epochs >= 1 && q.batch_size >= 1,
               "{}: the training position (step {}, epoch {}, step {} of {} in it, {} epochs, batch {}) is impossible",
               origin, q.global_step, q.epoch, q.step_in_epoch, q.updates_per_epoch, q.epochs, q.batch_size);
  DTRAIN_CHECK(j.contains("files"), "{}: missing field \"files\"", origin);
  m.files = parse_files(origin, j["files"]);
  return m;
}

std::string RankRecord::to_json() const {
  json j = {{"rank", rank},
            {"rng", {{"seed", rng_seed}, {"offset", rng_offset}}},
            {"epoch_sums", epoch_sums},
            {"files", files_json(files)}};
  if (!error.empty()) j["error"] = error;
  return j.dump(2) + "\n";
}

RankRecord RankRecord::parse(const std::string& origin, const std::string& text) {
  const json j = parse_json(origin, text);
  RankRecord r;
  r.rank = field<int>(origin, j, "rank");
  const json& rng = j.contains("rng") ? j["rng"] : json();
  r.rng_seed = field<std::uint64_t>(origin, rng, "seed");
  r.rng_offset = field<std::uint64_t>(origin, rng, "offset");
  r.epoch_sums = field<std::vector<double>>(origin, j, "epoch_sums");
  DTRAIN_CHECK(j.contains("files"), "{}: missing field \"files\"", origin);
  r.files = parse_files(origin, j["files"]);
  if (j.contains("error")) r.error = field<std::string>(origin, j, "error");
  return r;
}

}  // namespace dtrain::checkpoint
