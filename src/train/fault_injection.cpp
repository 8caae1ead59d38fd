#include "train/fault_injection.h"

#include "dtrain/autograd/functions.h"
#include "dtrain/core/environment.h"
#include "dtrain/core/error.h"

#include <cmath>
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
  double seconds = 0;               // stop-at-step: how long the rank stays stopped
  std::int64_t step_in_epoch = -1;  // kill-in-epoch: `at` is the epoch
  bool every_rank = false;          // kill-host-at-step on a rank of that host: whatever its rank
};

// kill-host-at-step:<host>:<step>: a kill-at-step of every rank whose DTRAIN_HOST_ID is
// `host` (an emulated host that goes away), none elsewhere.
Fault parse_host_fault(const char* text) {
  int host = -1;
  long long at = -1;
  char rest = 0;
  DTRAIN_CHECK(std::sscanf(text, "kill-host-at-step:%d:%lld%c", &host, &at, &rest) == 2 && host >= 0 && at >= 1,
               "DTRAIN_FAULT='{}': expected kill-host-at-step:<host id>:<step> (DTRAIN_HOST_ID's number, step >= 1)",
               text);
  if (env::get_int("DTRAIN_HOST_ID") != host) return {};
  return {.kind = "kill-at-step", .at = at, .every_rank = true};
}

Fault parse() {
  const char* text = std::getenv("DTRAIN_FAULT");
  const char* restart = std::getenv("DTRAIN_RESTART_COUNT");
  if (text == nullptr || *text == '\0' || (restart != nullptr && std::string(restart) != "0")) return {};
  if (std::string(text).starts_with("kill-host-at-step:")) return parse_host_fault(text);
  char kind[32] = {};
  int rank = -1;
  long long at = -1;
  double seconds = 0;
  char rest = 0;
  Fault f;
  const int fields = std::sscanf(text, "%31[^:]:%d:%lld:%lf%c", kind, &rank, &at, &seconds, &rest);
  const std::string k = kind;
  if (fields == 3 && k != "stop-at-step") f = {.kind = kind, .rank = rank, .at = at};
  if (k == "loss-spike") f.seconds = 1000;  // the factor
  if (fields == 4 && (k == "stop-at-step" || k == "loss-spike") && seconds > 0) {
    f = {.kind = kind, .rank = rank, .at = at, .seconds = seconds};
  }
  if (k == "kill-in-epoch") {
    f = {};
    long long step = -1;
    if (std::sscanf(text, "%31[^:]:%d:%lld:%lld%c", kind, &rank, &at, &step, &rest) == 4 && at >= 1 && step >= 1) {
      f = {.kind = kind, .rank = rank, .at = at, .step_in_epoch = step};
    }
  }
  DTRAIN_CHECK(f.kind == "kill-at-step" || f.kind == "kill-in-epoch" || f.kind == "kill-in-save" ||
                   f.kind == "stop-at-step" || f.kind == "loss-spike" || f.kind == "loss-nan",
               "DTRAIN_FAULT='{}': expected kill-at-step:<rank>:<step>, kill-in-epoch:<rank>:<epoch>:<step>, "
               "kill-host-at-step:<host id>:<step>, kill-in-save:<rank>:<n>, stop-at-step:<rank>:<step>:<seconds> "
               "(seconds > 0), "
               "loss-spike:<rank>:<step>[:<factor>] or loss-nan:<rank>:<step>",
               text);
  return f;
}

const Fault& fault() {
  static const Fault f = parse();
  return f;
}

void maybe_kill(const char* kind, int rank, std::int64_t at) {
  const Fault& f = fault();
  if (f.kind != kind || (f.rank != rank && !f.every_rank) || f.at != at) return;
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

void maybe_kill_at_step(int rank, std::int64_t global_step, int epoch, std::int64_t step_in_epoch) {
  maybe_kill("kill-at-step", rank, global_step);
  if (fault().step_in_epoch == step_in_epoch) maybe_kill("kill-in-epoch", rank, epoch);
  maybe_stop(rank, global_step);
}
void maybe_kill_in_save(int rank, int save) { maybe_kill("kill-in-save", rank, save); }

dist::LossFn corrupt_loss(dist::LossFn loss, int rank, std::function<std::int64_t()> step) {
  const Fault& f = fault();
  if ((f.kind != "loss-spike" && f.kind != "loss-nan") || f.rank != rank) return loss;
  return [loss = std::move(loss), step = std::move(step), f](const Variable& out, const Tensor& y) {
    Variable l = loss(out, y);
    if (step() + 1 != f.at) return l;
    std::fprintf(stderr, "DTRAIN_FAULT: rank %d: %s at step %lld\n", f.rank, f.kind.c_str(),
                 static_cast<long long>(f.at));
    std::fflush(stderr);
    return l * (f.kind == "loss-nan" ? std::nan("") : f.seconds);
  };
}

}  // namespace dtrain::train::fault
