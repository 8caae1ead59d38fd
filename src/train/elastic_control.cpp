#include "train/elastic_control.h"

#include "dtrain/core/error.h"

#include <cstdlib>
#include <fstream>
#include <string>

namespace dtrain::train {

namespace {

const char* control_file() {
  const char* path = std::getenv("DTRAIN_ELASTIC_CONTROL");
  return path != nullptr && *path != '\0' ? path : nullptr;
}

}  // namespace

bool elastic_control_enabled() { return control_file() != nullptr; }

bool relaunch_requested() {
  const char* path = control_file();
  if (path == nullptr) return false;
  std::ifstream in(path);  // none yet: no request
  std::string word;
  return static_cast<bool>(in >> word) && word == "relaunch";
}

void acknowledge_relaunch(std::int64_t global_step) {
  const char* path = control_file();
  if (path == nullptr) return;
  std::ofstream out(path, std::ios::trunc);
  out << "stopped after global step " << global_step << "\n";
  DTRAIN_CHECK(out.good(), "DTRAIN_ELASTIC_CONTROL={}: cannot write the answer to the launcher", path);
}

}  // namespace dtrain::train
