#include "train/fault_injection.h"

#include "dtrain/core/error.h"

#include <csignal>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <sys/types.h>
#include <unistd.h>

namespace dtrain::train::fault {

namespace {

struct Fault {
  std::string kind;  // "" for none
  int rank = -1;
  std::int64_t at = -1;
  double seconds = 0;  // stop-at-step: how long the rank stays stopped
};

Fault parse() {
  const char* text = std::getenv("DTRAIN_FAULT");
  const char* restart = std::getenv("DTRAIN_RESTART_COUNT");
  if (text == nullptr || *text == '\0' || (restart != nullptr && std::string(restart) != "0")) return {};
  char kind[32] = {};
  int rank = -1;
  long long at = -1;
  double seconds = 0;
  char rest = 0;
  Fault f;
  const int fields = std::sscanf(text, "%31[^:]:%d:%lld:%lf%c", kind, &rank, &at, &seconds, &rest);
  if (fields == 3 && std::string(kind) != "stop-at-step") f = {.kind = kind, .rank = rank, .at = at};
  if (fields == 4 && std::string(kind) == "stop-at-step" && seconds > 0) {
    f = {.kind = kind, .rank = rank, .at = at, .seconds = seconds};
  }
  DTRAIN_CHECK(f.kind == "kill-at-step" || f.kind == "kill-in-save" || f.kind == "stop-at-step",
               "DTRAIN_FAULT='{}': expected kill-at-step:<rank>:<step>, kill-in-save:<rank>:<n> or "
               "stop-at-step:<rank>:<step>:<seconds> (seconds > 0)",
               text);
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

// SIGSTOP, as a node that freezes (every thread stops, MPI's progress too), and SIGCONT
// from a child process after the time: the child only sleeps, signals and exits.
void maybe_stop(int rank, std::int64_t at) {
  const Fault& f = fault();
  if (f.kind != "stop-at-step" || f.rank != rank || f.at != at) return;
  std::fprintf(stderr, "DTRAIN_FAULT: rank %d stopping itself for %.1f s (stop-at-step %lld)\n", rank, f.seconds,
               static_cast<long long>(at));
  std::fflush(stderr);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child == 0) {
    const auto whole = static_cast<time_t>(f.seconds);
    timespec pause{.tv_sec = whole, .tv_nsec = static_cast<long>((f.seconds - static_cast<double>(whole)) * 1e9)};
    while (nanosleep(&pause, &pause) != 0) {}
    kill(parent, SIGCONT);
    _exit(0);
  }
  DTRAIN_CHECK(child > 0, "DTRAIN_FAULT: fork for stop-at-step failed");
  std::raise(SIGSTOP);
  std::fprintf(stderr, "DTRAIN_FAULT: rank %d continues\n", rank);
  std::fflush(stderr);
}

}  // namespace

void maybe_kill_at_step(int rank, std::int64_t global_step) {
  maybe_kill("kill-at-step", rank, global_step);
  maybe_stop(rank, global_step);
}
void maybe_kill_in_save(int rank, int save) { maybe_kill("kill-in-save", rank, save); }

}  // namespace dtrain::train::fault
