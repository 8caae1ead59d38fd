// What the benchmarks print about the machine they ran on.
#pragma once

#include <fstream>
#include <string>

namespace dtrain::bench {

// The CPU model from /proc/cpuinfo, or "unknown CPU" when it is not readable.
inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

}  // namespace dtrain::bench
