#include "dtrain/comm/collective_table.h"

#include "dtrain/core/environment.h"
#include "dtrain/core/error.h"

#include "comm_collective_table_json.h"  // kShippedCollectiveTable, generated from collective_table.json

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace dtrain::dist {
namespace {
constexpr const char* kFormat = "dtrain-allreduce-table/1";

bool is_flat(AllReduceAlgorithm a) {
  return a == AllReduceAlgorithm::Mpi || a == AllReduceAlgorithm::Ring || a == AllReduceAlgorithm::RecursiveDoubling ||
         a == AllReduceAlgorithm::Rabenseifner;
}

// The rule from before the table (and for shapes it has no case near).
AllReduceChoice built_in(std::size_t bytes, int hosts) {
  constexpr std::size_t kMultiHostShmFrom = std::size_t{256} << 10;
  if (hosts == 1 || bytes >= kMultiHostShmFrom) return {AllReduceAlgorithm::SharedMemory, AllReduceAlgorithm::Ring};
  return {AllReduceAlgorithm::Mpi, AllReduceAlgorithm::Ring};
}

using Json = nlohmann::json;

const Json& field(const Json& object, const char* name, const std::string& where) {
  DTRAIN_CHECK(object.is_object() && object.contains(name), "{}: missing field '{}'", where, name);
  return object.at(name);
}

int positive_int(const Json& object, const char* name, const std::string& where) {
  const Json& v = field(object, name, where);
  DTRAIN_CHECK(v.is_number_integer() && v.get<std::int64_t>() >= 1 && v.get<std::int64_t>() <= 1 << 24,
               "{}: '{}' must be an integer >= 1, got {}", where, name, v.dump());
  return v.get<int>();
}
// One list of a case ("choices" or a collective's): steps in growing up_to_bytes, the last
// one unbounded; errors name the list and the step.
template <class Choice, class ParseOne>
std::vector<CollectiveTable::StepOf<Choice>> parse_steps(const Json& steps, const std::string& where, const char* list,
                                                        ParseOne parse_one) {
  DTRAIN_CHECK(steps.is_array() && !steps.empty(), "{}: '{}' must be a non-empty array", where, list);
  std::vector<CollectiveTable::StepOf<Choice>> out;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const std::string at = fmt::format("{}.{}[{}]", where, list, k);
    const Json& algorithm = field(steps[k], "algorithm", at);
    DTRAIN_CHECK(algorithm.is_string(), "{}: 'algorithm' must be a string", at);
    CollectiveTable::StepOf<Choice> step{std::nullopt, parse_one(algorithm.get<std::string>(), at)};
    const bool last = k + 1 == steps.size();
    if (steps[k].contains("up_to_bytes")) {
      const Json& up = steps[k]["up_to_bytes"];
      DTRAIN_CHECK(up.is_number_unsigned(), "{}: 'up_to_bytes' must be a byte count, got {}", at, up.dump());
      step.up_to_bytes = up.get<std::uint64_t>();
      DTRAIN_CHECK(!last, "{}: the last choice covers every larger message and takes no 'up_to_bytes'", at);
      DTRAIN_CHECK(out.empty() || *step.up_to_bytes > *out.back().up_to_bytes,
                   "{}: 'up_to_bytes' must grow from choice to choice", at);
    } else {
      DTRAIN_CHECK(last, "{}: only the last choice may leave out 'up_to_bytes'", at);
    }
    out.push_back(step);
  }
  return out;
}

std::string expected_names(TunedCollective which) {
  std::vector<std::string> names;
  for (auto a : {CollectiveAlgorithm::Mpi, CollectiveAlgorithm::Ring, CollectiveAlgorithm::RecursiveHalving,
                 CollectiveAlgorithm::RecursiveDoubling, CollectiveAlgorithm::BinomialTree, CollectiveAlgorithm::Chain,
                 CollectiveAlgorithm::SharedMemory}) {
    if (runs(which, a)) names.emplace_back(collective_algorithm_name(a));
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

// The step that covers `bytes`.
template <class Step>
const Step& step_for(const std::vector<Step>& steps, std::size_t bytes) {
  for (const Step& step : steps) {
    if (!step.up_to_bytes || bytes <= *step.up_to_bytes) return step;
  }
  return steps.back();  // unreachable: the last step has no bound
}

// One list as JSON lines, one step per line.
template <class Step, class Name>
std::string steps_json(const std::vector<Step>& steps, Name name) {
  std::string out;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const Step& s = steps[k];
    std::string bound = s.up_to_bytes ? fmt::format("\"up_to_bytes\": {}, ", *s.up_to_bytes) : "";
    out += fmt::format("{}\n       {{{}\"algorithm\": \"{}\"}}", k ? "," : "", bound, name(s.choice));
  }
  return out;
}
}  // namespace

const char* collective_name(TunedCollective c) {
  switch (c) {
    case TunedCollective::ReduceScatter: return "reduce_scatter";
    case TunedCollective::AllGather: return "all_gather";
    case TunedCollective::Broadcast: return "broadcast";
  }
  return "?";
}

bool runs(TunedCollective c, CollectiveAlgorithm a) {
  using A = CollectiveAlgorithm;
  if (a == A::Mpi || a == A::SharedMemory) return true;
  switch (c) {
    case TunedCollective::ReduceScatter: return a == A::Ring || a == A::RecursiveHalving;
    case TunedCollective::AllGather: return a == A::Ring || a == A::RecursiveDoubling;
    case TunedCollective::Broadcast: return a == A::BinomialTree || a == A::Chain;
  }
  return false;
}

std::string choice_name(const AllReduceChoice& c) {
  if (c.algorithm != AllReduceAlgorithm::SharedMemory) return algorithm_name(c.algorithm);
  if (c.leaders == AllReduceAlgorithm::Ring) return "shm";  // the default: all a one-host table needs
  return fmt::format("shm+{}", algorithm_name(c.leaders));
}

AllReduceChoice parse_choice(const std::string& text, const std::string& where) {
  const auto fail = [&] {
    DTRAIN_FAIL(
        "{}: unknown algorithm '{}' (expected mpi, ring, recursive_doubling, rabenseifner, shm or shm+ one of the "
        "first four)",
        where, text);
  };
  if (text.rfind("shm+", 0) == 0) {
    AllReduceChoice c{AllReduceAlgorithm::SharedMemory, AllReduceAlgorithm::Ring};
    try {
      c.leaders = parse_algorithm(text.substr(4));
    } catch (const Error&) {
      fail();
    }
    if (!is_flat(c.leaders)) fail();
    return c;
  }
  AllReduceChoice c;
  try {
    c.algorithm = parse_algorithm(text);
  } catch (const Error&) {
    fail();
  }
  if (c.algorithm == AllReduceAlgorithm::Auto) fail();
  return c;
}

CollectiveTable CollectiveTable::parse(const std::string& text, const std::string& source) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::exception& e) {
    DTRAIN_FAIL("{}: not JSON: {}", source, e.what());
  }
  const Json& format = field(doc, "format", source);
  DTRAIN_CHECK(format == kFormat, "{}: 'format' must be \"{}\", got {}", source, kFormat, format.dump());
  const Json& cases = field(doc, "cases", source);
  DTRAIN_CHECK(cases.is_array(), "{}: 'cases' must be an array", source);
  CollectiveTable table;
  table.source_ = source;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string where = fmt::format("{}: cases[{}]", source, i);
    const Json& j = cases[i];
    Case c;
    c.hosts = positive_int(j, "hosts", where);
    c.ranks = positive_int(j, "ranks", where);
    DTRAIN_CHECK(c.ranks >= c.hosts, "{}: {} ranks cannot fill {} hosts", where, c.ranks, c.hosts);
    if (j.contains("measured")) {
      DTRAIN_CHECK(j["measured"].is_string(), "{}: 'measured' must be a string", where);
      c.measured = j["measured"].get<std::string>();
    }
    c.choices = parse_steps<AllReduceChoice>(field(j, "choices", where), where, "choices", parse_choice);
    for (TunedCollective which : kTunedCollectives) {
      const char* name = collective_name(which);
      if (!j.contains(name)) continue;
      c.steps(which) = parse_steps<CollectiveAlgorithm>(
          j[name], where, name, [which, name](const std::string& text, const std::string& at) {
            CollectiveAlgorithm a = CollectiveAlgorithm::Auto;
            try {
              a = parse_collective_algorithm(text);
            } catch (const Error&) {}
            DTRAIN_CHECK(runs(which, a), "{}: unknown {} algorithm '{}' (expected {})", at, name, text,
                         expected_names(which));
            return a;
          });
    }
    for (const Case& other : table.cases_) {
      DTRAIN_CHECK(other.hosts != c.hosts || other.ranks != c.ranks, "{}: a second case for {} ranks on {} hosts",
                   where, c.ranks, c.hosts);
    }
    table.cases_.push_back(std::move(c));
  }
  return table;
}

CollectiveTable CollectiveTable::read(const std::string& path) {
  std::ifstream in(path);
  DTRAIN_CHECK(in.good(), "{}: cannot open the collective table", path);
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

const CollectiveTable& CollectiveTable::active() {
  static const CollectiveTable table = [] {
    if (auto path = env::get("DTRAIN_COLLECTIVE_TABLE")) return read(*path);
    // The variable's name before the table chose more than the all-reduce; still honoured
    // so that job scripts written for it keep their tuned table.
    if (auto path = env::get("DTRAIN_ALLREDUCE_TABLE")) return read(*path);
    return parse(kShippedCollectiveTable, "the shipped collective table");
  }();
  return table;
}

const CollectiveTable::Case* CollectiveTable::find(int ranks, int hosts) const {
  const Case* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  for (const Case& c : cases_) {
    if ((c.hosts == 1) != (hosts == 1)) continue;
    const double distance = std::abs(std::log2(static_cast<double>(c.ranks) / ranks)) +
                            std::abs(std::log2(static_cast<double>(c.hosts) / hosts));
    if (distance < best_distance) {
      best = &c;
      best_distance = distance;
    }
  }
  return best;
}

AllReduceChoice CollectiveTable::choose(std::size_t bytes, int ranks, int hosts) const {
  const Case* c = find(ranks, hosts);
  if (c == nullptr) return built_in(bytes, hosts);
  return step_for(c->choices, bytes).choice;
}

CollectiveAlgorithm CollectiveTable::choose(TunedCollective which, std::size_t bytes, int ranks, int hosts) const {
  const Case* c = find(ranks, hosts);
  if (c == nullptr || c->steps(which).empty()) return CollectiveAlgorithm::Mpi;
  return step_for(c->steps(which), bytes).choice;
}

void CollectiveTable::put(Case c) {
  for (Case& existing : cases_) {
    if (existing.hosts == c.hosts && existing.ranks == c.ranks) {
      existing = std::move(c);
      return;
    }
  }
  cases_.push_back(std::move(c));
  std::sort(cases_.begin(), cases_.end(),
            [](const Case& a, const Case& b) { return std::tie(a.hosts, a.ranks) < std::tie(b.hosts, b.ranks); });
}

std::string CollectiveTable::to_json() const {
  // One case per block and one choice per line: the shipped file stays readable in a diff.
  std::string out = fmt::format("{{\n  \"format\": \"{}\",\n  \"cases\": [", kFormat);
  for (std::size_t i = 0; i < cases_.size(); ++i) {
    const Case& c = cases_[i];
    out += fmt::format("{}\n    {{\"hosts\": {}, \"ranks\": {}, \"measured\": {},\n     \"choices\": [", i ? "," : "",
                       c.hosts, c.ranks, Json(c.measured).dump());
    out += steps_json(c.choices, choice_name) + "]";
    for (TunedCollective which : kTunedCollectives) {
      if (c.steps(which).empty()) continue;
      out += fmt::format(",\n     \"{}\": [", collective_name(which));
      out += steps_json(c.steps(which), collective_algorithm_name) + "]";
    }
    out += "}";
  }
  out += "\n  ]\n}\n";
  return out;
}

std::uint64_t CollectiveTable::fingerprint() const {
  // FNV-1a over the canonical text: the same on every rank and every build.
  std::uint64_t h = 14695981039346656037ULL;
  for (unsigned char ch : to_json()) {
    h ^= ch;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace dtrain::dist
