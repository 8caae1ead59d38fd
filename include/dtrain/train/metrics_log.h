// Metrics as JSON lines: one object per event, flushed as written, so that a crash
// loses nothing and any tool (jq, pandas) can read the file while training runs.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::train {

class MetricsLog {
 public:
  MetricsLog() = default;  // disabled: write() does nothing
  // Opens (truncates) `path`; throws dtrain::Error naming it when it cannot be written.
  explicit MetricsLog(const std::filesystem::path& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  bool enabled() const { return file_ != nullptr; }
  // {"event": event, name: value, ...} plus a wall-clock "time" in seconds.
  // `series`: arrays of numbers, e.g. a histogram.
  void write(const std::string& event, const std::vector<std::pair<std::string, double>>& values,
             const std::vector<std::pair<std::string, std::vector<double>>>& series = {});

 private:
  std::FILE* file_ = nullptr;
  std::filesystem::path path_;
};

}  // namespace dtrain::train
