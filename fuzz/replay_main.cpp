// A main() for the fuzz targets in builds without libFuzzer: runs LLVMFuzzerTestOneInput on
// each file named on the command line, or on every file of a named folder (sorted), so that
// the inputs kept under fuzz/regressions/ run as ctest tests. A bug aborts, or throws out of
// the target (reported here with the file), or is caught by the sanitizers of an asan build.
// The file name says what the readers must make of it: "valid-*" accepted without any
// rejection, "invalid-*" rejected at least once; anything else (the fuzzer's crash-<hash>
// reproducers) only must not crash.
#include "fuzz_support.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg = argv[i];
    if (fs::is_directory(arg)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(arg))
        if (entry.is_regular_file()) files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else {
      inputs.push_back(arg);
    }
  }
  if (inputs.empty()) {
    // An empty regression folder would pass without testing anything.
    std::fprintf(stderr, "usage: %s FILE|DIR...: no inputs given\n", argv[0]);
    return 2;
  }
  int failures = 0;
  for (const fs::path& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read '%s'\n", path.c_str());
      return 2;
    }
    const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::fprintf(stderr, "%s (%zu bytes)\n", path.c_str(), bytes.size());
    auto& outcome = dtrain::fuzz::outcome();
    outcome = {.replaying = true};
    try {
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "FAILED: '%s' threw out of the target: %s\n", path.c_str(), e.what());
      return 1;
    }
    const std::string name = path.filename().string();
    if (name.starts_with("valid-") && (outcome.rejected > 0 || outcome.accepted == 0)) {
      std::fprintf(stderr, "FAILED: '%s' is named valid but was rejected\n", path.c_str());
      ++failures;
    }
    if (name.starts_with("invalid-") && outcome.rejected == 0) {
      std::fprintf(stderr, "FAILED: '%s' is named invalid but was accepted\n", path.c_str());
      ++failures;
    }
  }
  if (failures > 0) return 1;
  std::fprintf(stderr, "%zu inputs ok\n", inputs.size());
  return 0;
}
