// What the fuzz targets share: the libFuzzer entry point's declaration, a scratch folder for
// readers that take a path, the check that turns a broken promise into a crash, and the
// tally of accepted and rejected inputs that the replay tests check against file names.
#pragma once

#include "dtrain/core/error.h"

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace dtrain::fuzz {

// A folder of this process's own under $TMPDIR (else /tmp), made on first use and removed at
// a normal exit; scripts/fuzz.sh points TMPDIR at a folder of its own (on a tmpfs where there
// is one) and removes that, with whatever a crash left, when it ends. Files are rewritten for
// every input: a few KB each.
inline const std::filesystem::path& scratch_dir() {
  struct Scratch {
    std::filesystem::path path;
    Scratch() {
      const char* tmp = std::getenv("TMPDIR");
      path = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") / ("dtrain-fuzz-" + std::to_string(::getpid()));
      std::filesystem::create_directories(path);
    }
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Scratch scratch;
  return scratch.path;
}

inline void write_file(const std::filesystem::path& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out.flush()) {
    std::fprintf(stderr, "fuzz: cannot write '%s'\n", path.c_str());
    std::abort();
  }
}

// A reader that accepted the input broke a promise of its API: report and abort, which
// libFuzzer records as a crash (and the replay test as a failure).
inline void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: broken promise: %s\n", what);
    std::abort();
  }
}

// What the readers made of the current input. replay_main.cpp resets it per file, prints each
// outcome, and checks "valid-*" files are only accepted and "invalid-*" ones rejected.
struct Outcome {
  int accepted = 0;
  int rejected = 0;
  bool replaying = false;  // print each outcome (libFuzzer runs stay quiet)
};
inline Outcome& outcome() {
  static Outcome o;
  return o;
}

// A reader took the input; `what` says what came out.
inline void accepted(const std::string& what) {
  ++outcome().accepted;
  if (outcome().replaying) std::fprintf(stderr, "  accepted: %s\n", what.c_str());
}
// A reader reported bad bytes as bad: the expected outcome for them.
inline void rejected(const dtrain::Error& e) {
  ++outcome().rejected;
  if (outcome().replaying) std::fprintf(stderr, "  rejected: %s\n", e.message().c_str());
}

}  // namespace dtrain::fuzz
