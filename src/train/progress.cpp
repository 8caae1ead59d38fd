#include "dtrain/train/progress.h"

#include "dtrain/core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <unistd.h>

namespace dtrain::train {

std::string format_duration(double seconds) {
  auto s = static_cast<std::int64_t>(std::max(0.0, std::round(seconds)));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

ProgressMode parse_progress_mode(std::string_view text) {
  if (text == "auto") return ProgressMode::Auto;
  if (text == "bar") return ProgressMode::Bar;
  if (text == "lines") return ProgressMode::Lines;
  if (text == "none") return ProgressMode::None;
  DTRAIN_FAIL("progress mode '{}': expected auto, bar, lines or none", text);
}

namespace {

bool under_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

// Whether the process `pid`'s standard output is a terminal device, from /proc.
bool stdout_of_is_terminal(pid_t pid) {
  std::error_code ec;
  const std::filesystem::path target = std::filesystem::read_symlink(fmt::format("/proc/{}/fd/1", pid), ec);
  if (ec) return false;
  const std::string t = target.string();
  return t.starts_with("/dev/pts/") || t.starts_with("/dev/tty") || t == "/dev/console";
}

}  // namespace

bool output_is_terminal(std::FILE* out) {
  if (::isatty(::fileno(out)) == 0) return false;
  // mpirun (Open MPI's local ranks are its children; remote ones, orted's, whose output
  // is a socket) relays the ranks' output through pseudo-terminals.
  if (under_mpi_launcher()) return stdout_of_is_terminal(::getppid());
  return true;
}

Progress::Progress(std::string label, std::int64_t total_steps, bool enabled, std::FILE* out, double interval_s,
                   ProgressMode mode)
    : label_(std::move(label)),
      total_(total_steps),
      enabled_(enabled && mode != ProgressMode::None),
      out_(out),
      bar_(mode == ProgressMode::Bar || (mode == ProgressMode::Auto && output_is_terminal(out))),
      interval_s_(interval_s),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

Progress::~Progress() { finish(); }

double Progress::samples_per_second() const {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return elapsed > 0 ? static_cast<double>(samples_) / elapsed : 0;
}

std::string Progress::render(bool terminal) const {
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // A rank that takes more than its share of handed-out batches passes the total.
  const std::int64_t left = std::max<std::int64_t>(0, total_ - step_);
  double eta = step_ > 0 ? elapsed / static_cast<double>(step_) * static_cast<double>(left) : 0;
  std::string bar;
  if (terminal) {
    constexpr int kWidth = 24;
    int filled = total_ > 0 ? static_cast<int>(kWidth * std::min(step_, total_) / total_) : kWidth;
    bar.assign(1, '[');
    bar.append(static_cast<std::size_t>(filled), '=');
    if (filled < kWidth) bar.append(1, '>').append(static_cast<std::size_t>(kWidth - filled - 1), ' ');
    bar.append("] ");
  }
  return fmt::format("{} {}{}/{} loss {:.4f}  {:.0f} samples/s  elapsed {}  ETA {}", label_, bar, step_, total_, loss_,
                     samples_per_second(), format_duration(elapsed), format_duration(eta));
}

void Progress::update(std::int64_t step, double loss, std::int64_t samples) {
  step_ = step;
  loss_ = loss;
  samples_ += samples * sample_scale_;
  if (!due(step)) return;
  if (bar_) {
    fmt::print(out_, "\r{}\033[K", render(true));
    finished_ = false;  // a line is open again (after a finish() in the middle)
  } else {
    fmt::print(out_, "{}\n", render(false));
  }
  last_print_ = std::chrono::steady_clock::now();
  std::fflush(out_);
}

bool Progress::due(std::int64_t step) const {
  if (!enabled_) return false;
  if (step == total_) return true;
  // A terminal is redrawn at most ~10 times a second (it is slow too); a log gets a line
  // every interval_s.
  const std::chrono::duration<double> since = std::chrono::steady_clock::now() - last_print_;
  return since.count() >= (bar_ ? 0.1 : interval_s_);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_ && bar_) {
    fmt::print(out_, "\n");
    std::fflush(out_);
  }
}

}  // namespace dtrain::train
