#include "dtrain/dist/strategy/cluster_spec.h"

#include <nlohmann/json.hpp>

#include <array>
#include <fstream>
#include <set>
#include <sstream>

#include <unistd.h>

namespace dtrain::dist {
namespace {

std::vector<std::string> entries(const nlohmann::json& cluster, const char* role, const std::string& source) {
  DTRAIN_CHECK(cluster.contains(role), "{}: cluster.{} is missing: expected a list of \"host:port\" strings", source,
               role);
  const nlohmann::json& list = cluster.at(role);
  DTRAIN_CHECK(list.is_array() && !list.empty(), "{}: cluster.{} must be a non-empty list of \"host:port\" strings",
               source, role);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    DTRAIN_CHECK(list[i].is_string() && !list[i].get<std::string>().empty(),
                 "{}: cluster.{}[{}] must be a non-empty \"host\" or \"host:port\" string, got {}", source, role, i,
                 list[i].dump());
    out.push_back(list[i].get<std::string>());
  }
  return out;
}

std::string host_of(const std::string& entry) { return entry.substr(0, entry.rfind(':')); }

}  // namespace

ClusterSpec parse_cluster_spec(const std::string& text, const std::string& source, int world_size) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    DTRAIN_FAIL("{}: not valid JSON ({})", source, e.what());
  }
  DTRAIN_CHECK(doc.is_object(), "{}: expected a JSON object {{\"cluster\": {{...}}}}, got {}", source, doc.type_name());
  for (const auto& [key, value] : doc.items()) {
    DTRAIN_CHECK(key == "cluster",
                 "{}: unknown key '{}' (expected only \"cluster\"; under mpirun the rank gives each "
                 "process its task)",
                 source, key);
  }
  DTRAIN_CHECK(doc.contains("cluster"), "{}: the key \"cluster\" is missing", source);
  const nlohmann::json& cluster = doc.at("cluster");
  DTRAIN_CHECK(cluster.is_object(), "{}: cluster must be an object with \"worker\" and \"ps\" lists, got {}", source,
               cluster.type_name());
  for (const auto& [key, value] : cluster.items()) {
    DTRAIN_CHECK(key == "worker" || key == "ps",
                 "{}: unknown role cluster.{} (expected \"worker\" and \"ps\"; worker 0 is the chief)", source, key);
  }
  ClusterSpec spec{entries(cluster, "worker", source), entries(cluster, "ps", source)};
  std::set<std::string> seen;
  for (const auto* role : {&spec.workers, &spec.ps}) {
    for (std::size_t i = 0; i < role->size(); ++i) {
      const std::string& e = (*role)[i];
      DTRAIN_CHECK(seen.insert(e).second, "{}: cluster.{}[{}] \"{}\" is listed twice", source,
                   role == &spec.workers ? "worker" : "ps", i, e);
    }
  }
  const auto total = static_cast<int>(spec.workers.size() + spec.ps.size());
  DTRAIN_CHECK(total == world_size, "{}: {} worker(s) + {} ps = {} tasks, but the job has {} ranks (mpirun -np {})",
               source, spec.workers.size(), spec.ps.size(), total, world_size, world_size);
  return spec;
}

ClusterSpec read_cluster_spec(const std::string& path, int world_size) {
  std::ifstream in(path);
  DTRAIN_CHECK(in.good(), "cluster spec '{}': cannot be read", path);
  std::stringstream text;
  text << in.rdbuf();
  return parse_cluster_spec(text.str(), "cluster spec '" + path + "'", world_size);
}

void check_cluster_hosts(const ClusterSpec& spec, const std::string& source, Communicator& world) {
  constexpr std::int64_t kMax = 256;
  std::array<char, kMax> name{};
  gethostname(name.data(), kMax - 1);
  Tensor mine = Tensor::zeros({kMax}, {DType::i32});
  for (std::int64_t i = 0; i < kMax && name[static_cast<std::size_t>(i)] != 0; ++i) {
    mine.narrow(0, i, 1).fill_(static_cast<unsigned char>(name[static_cast<std::size_t>(i)]));
  }
  Tensor all = Tensor::empty({world.size(), kMax}, {DType::i32});
  world.all_gather(mine, all);
  const std::vector<std::int32_t> codes = all.to_vector<std::int32_t>();
  for (int r = 0; r < world.size(); ++r) {
    std::string host;
    for (std::int64_t i = 0; i < kMax; ++i) {
      const std::int32_t c = codes[static_cast<std::size_t>(r * kMax + i)];
      if (c == 0) break;
      host.push_back(static_cast<char>(c));
    }
    const bool worker = r < static_cast<int>(spec.workers.size());
    const std::size_t index = worker ? static_cast<std::size_t>(r) : static_cast<std::size_t>(r) - spec.workers.size();
    const std::string& entry = worker ? spec.workers[index] : spec.ps[index];
    const std::string wanted = host_of(entry);
    DTRAIN_CHECK(wanted == "localhost" || wanted == "127.0.0.1" || wanted == host,
                 "{}: cluster.{}[{}] \"{}\" is rank {}, which mpirun started on host '{}' (place the ranks to match, "
                 "e.g. with a hostfile, or name that host)",
                 source, worker ? "worker" : "ps", index, entry, r, host);
  }
}

}  // namespace dtrain::dist
