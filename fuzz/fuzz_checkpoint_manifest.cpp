// The checkpoint's JSON as a resume meets it: the input parsed as a manifest
// (manifest.json) and as a rank's record (rank-<r>.json); whatever parses must write back
// the JSON it was read from, field for field.
#include "fuzz_support.h"

#include "dtrain/checkpoint/manifest.h"
#include "dtrain/core/error.h"

#include <optional>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using dtrain::fuzz::expect;
  using namespace dtrain::checkpoint;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string what;
  std::optional<dtrain::Error> error;
  try {
    const Manifest m = Manifest::parse("fuzz/manifest.json", text);
    expect(Manifest::parse("again", m.to_json()).to_json() == m.to_json(), "a manifest writes back what it read");
    what = std::to_string(m.files.size()) + " files in a manifest";
  } catch (const dtrain::Error& e) {
    error = e;
  }
  try {
    const RankRecord r = RankRecord::parse("fuzz/rank-0.json", text);
    expect(RankRecord::parse("again", r.to_json()).to_json() == r.to_json(), "a rank record writes back what it read");
    what = "a rank record of " + std::to_string(r.files.size()) + " files";
  } catch (const dtrain::Error& e) {
    if (what.empty()) error = e;
  }
  if (!what.empty()) dtrain::fuzz::accepted(what);
  else dtrain::fuzz::rejected(*error);
  return 0;
}
