#include "train/fault_injection.h"

#include "dtrain/core/error.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dtrain::train::fault {

namespace {

struct Fault {
  std::string kind;  // "" for none
  int rank = -1;
  std::int64_t at = -1;
};

Fault parse() {
  const char* text = std::getenv("DTRAIN_FAULT");
  const char* restart = std::getenv("DTRAIN_RESTART_COUNT");
  if (text == nullptr || *text == '\0' || (restart != nullptr && std::string(restart) != "0")) return {};
  char kind[32] = {};
  int rank = -1;
  long long at = -1;
  char rest = 0;
  Fault f;
  if (std::sscanf(text, "%31[^:]:%d:%lld%c", kind, &rank, &at, &rest) == 3) f = {.kind = kind, .rank = rank, .at = at};
  DTRAIN_CHECK(f.kind == "kill-at-step" || f.kind == "kill-in-save",
               "DTRAIN_FAULT='{}': expected kill-at-step:<rank>:<step> or kill-in-save:<rank>:<n>", text);
  return f;
}

const Fault& fault() {
  static const Fault f = parse();
  return f;
}

void maybe_kill(const char* kind, int rank, std::int64_t at) {
  const Fault& f = fault();
  if (f.kind != kind || f.rank != rank || f.at != at) return;
  std::fprintf(stderr, "DTRAIN_FAULT: rank %d killing itself (%s %lld)\n", rank, kind, static_cast<long long>(at));
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace

void maybe_kill_at_step(int rank, std::int64_t global_step) { maybe_kill("kill-at-step", rank, global_step); }
void maybe_kill_in_save(int rank, int save) { maybe_kill("kill-in-save", rank, save); }

}  // namespace dtrain::train::fault
