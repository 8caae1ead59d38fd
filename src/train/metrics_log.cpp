#include "dtrain/train/metrics_log.h"

#include "dtrain/core/error.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace dtrain::train {

MetricsLog::MetricsLog(const std::filesystem::path& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "w");
  DTRAIN_CHECK(file_ != nullptr, "metrics file '{}': cannot open for writing ({})", path.string(),
               std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const std::string& event, const std::vector<std::pair<std::string, double>>& values,
                       const std::vector<std::pair<std::string, std::vector<double>>>& series) {
  if (!file_) return;
  nlohmann::json line;
  line["event"] = event;
  line["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& [name, value] : values) line[name] = value;
  for (const auto& [name, numbers] : series) line[name] = numbers;
  std::string text = line.dump() + "\n";
  bool ok = std::fwrite(text.data(), 1, text.size(), file_) == text.size() && std::fflush(file_) == 0;
  DTRAIN_CHECK(ok, "metrics file '{}': write failed ({})", path_.string(), std::strerror(errno));
}

}  // namespace dtrain::train
