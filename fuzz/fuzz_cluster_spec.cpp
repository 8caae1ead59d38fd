// The parameter-server cluster spec parser, as `--cluster FILE` or DTRAIN_CLUSTER reach it:
// the whole input is the JSON text, checked against a job of 2 ranks (the seeds' one worker
// and one ps). Every check but the last, on the count, runs whatever the count.
#include "fuzz_support.h"

#include "dtrain/core/error.h"
#include "dtrain/dist/strategy/cluster_spec.h"

#include <set>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using dtrain::fuzz::expect;
  constexpr int kWorldSize = 2;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const dtrain::dist::ClusterSpec spec = dtrain::dist::parse_cluster_spec(text, "fuzz", kWorldSize);
    expect(!spec.workers.empty() && !spec.ps.empty(), "an accepted spec has a worker and a ps");
    expect(spec.workers.size() + spec.ps.size() == kWorldSize, "an accepted spec has one entry per rank");
    std::set<std::string> seen;
    for (const auto* role : {&spec.workers, &spec.ps})
      for (const std::string& entry : *role) {
        expect(!entry.empty(), "an accepted spec has no empty entry");
        expect(seen.insert(entry).second, "an accepted spec lists no entry twice");
      }
    dtrain::fuzz::accepted("worker " + spec.workers[0] + ", ps " + spec.ps[0]);
  } catch (const dtrain::Error& e) {
    dtrain::fuzz::rejected(e);
  }
  return 0;
}
