// What the text tests share: the corpora Debian packages put on the machine.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace dtrain::test {

// fortune-mod's files (Debian package fortunes).
inline const std::filesystem::path kFortunes = "/usr/share/games/fortunes";
// The GCIDE dictionary (Debian package dict-gcide).
inline const std::filesystem::path kGcide = "/usr/share/dictd/gcide.dict.dz";

// GPT-2's tiktoken rank file, where scripts/install-deps.sh --tests puts it.
inline std::filesystem::path gpt2_rank_file() {
  const char* data = std::getenv("DTRAIN_TEST_DATA");  // tests/data
  return std::filesystem::path(data ? data : "tests/data") / ".." / ".." / ".venv-tests" / "share" / "gpt2.tiktoken";
}

}  // namespace dtrain::test
