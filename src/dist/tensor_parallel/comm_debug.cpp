#include "dtrain/dist/tensor_parallel/comm_debug.h"

#include "dtrain/core/error.h"

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <tuple>

namespace dtrain::dist {

namespace {

using Key = std::tuple<std::string, std::string, std::string>;
struct Totals {
  std::int64_t count = 0, bytes = 0;
};

std::mutex mutex;
std::map<Key, Totals>* active = nullptr;  // the living CommDebugMode's counts, under `mutex`

bool matches(std::string_view want, const std::string& have) { return want.empty() || want == have; }

}  // namespace

CommDebugMode::CommDebugMode() {
  const std::lock_guard lock(mutex);
  DTRAIN_CHECK(active == nullptr, "CommDebugMode: another one is counting already (one at a time per process)");
  active = new std::map<Key, Totals>();
}

CommDebugMode::~CommDebugMode() {
  const std::lock_guard lock(mutex);
  delete active;
  active = nullptr;
}

std::vector<CollectiveCount> CommDebugMode::counts() const {
  const std::lock_guard lock(mutex);
  std::vector<CollectiveCount> out;
  for (const auto& [key, totals] : *active) {
    out.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), totals.count, totals.bytes});
  }
  return out;
}

std::int64_t CommDebugMode::count(std::string_view module, std::string_view kind, std::string_view pass) const {
  std::int64_t n = 0;
  for (const CollectiveCount& c : counts()) {
    if (matches(module, c.module) && matches(kind, c.kind) && matches(pass, c.pass)) n += c.count;
  }
  return n;
}

std::int64_t CommDebugMode::bytes(std::string_view module, std::string_view kind, std::string_view pass) const {
  std::int64_t n = 0;
  for (const CollectiveCount& c : counts()) {
    if (matches(module, c.module) && matches(kind, c.kind) && matches(pass, c.pass)) n += c.bytes;
  }
  return n;
}

std::string CommDebugMode::table() const {
  std::string out;
  for (const CollectiveCount& c : counts()) {
    out += fmt::format("{:<24} {:<15} {:<9} x{:<4} {:.1f} KiB\n", c.module, c.kind, c.pass, c.count,
                       static_cast<double>(c.bytes) / 1024.0);
  }
  return out;
}

void CommDebugMode::reset() {
  const std::lock_guard lock(mutex);
  active->clear();
}

namespace detail {
void record_collective(std::string_view module, std::string_view kind, bool backward, std::int64_t bytes) {
  const std::lock_guard lock(mutex);
  if (active == nullptr) return;
  Totals& t = (*active)[Key{std::string(module), std::string(kind), backward ? "backward" : "forward"}];
  t.count += 1;
  t.bytes += bytes;
}
}  // namespace detail

}  // namespace dtrain::dist
