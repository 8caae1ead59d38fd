#include "train/elastic_control.h"

#include "dtrain/core/environment.h"
#include "dtrain/core/error.h"

#include <fstream>
#include <optional>
#include <string>

namespace dtrain::train {

namespace {

std::optional<std::string> control_file() { return env::get("DTRAIN_ELASTIC_CONTROL"); }

}  // namespace

bool elastic_control_enabled() { return control_file().has_value(); }

bool relaunch_requested() {
  const std::optional<std::string> path = control_file();
  if (!path) return false;
  std::ifstream in(*path);  // none yet: no request
  std::string word;
  return static_cast<bool>(in >> word) && word == "relaunch";
}

void acknowledge_relaunch(std::int64_t global_step) {
  const std::optional<std::string> path = control_file();
  if (!path) return;
  std::ofstream out(*path, std::ios::trunc);
  out << "stopped after global step " << global_step << "\n";
  DTRAIN_CHECK(out.good(), "DTRAIN_ELASTIC_CONTROL={}: cannot write the answer to the launcher", *path);
}

}  // namespace dtrain::train
