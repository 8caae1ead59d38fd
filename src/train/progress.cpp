#include "dtrain/train/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unistd.h>

namespace dtrain::train {

std::string format_duration(double seconds) {
  auto s = static_cast<std::int64_t>(std::max(0.0, std::round(seconds)));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

Progress::Progress(std::string label, std::int64_t total_steps, bool enabled, std::FILE* out, double interval_s)
    : label_(std::move(label)),
      total_(total_steps),
      enabled_(enabled),
      out_(out),
      terminal_(::isatty(::fileno(out)) != 0),
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
  return fmt::format("{} {}{}/{} loss {:.4f}  {:.0f} samples/s  elapsed {}  ETA {}", label_, bar, step_, total_,
                     loss_, samples_per_second(), format_duration(elapsed), format_duration(eta));
}

void Progress::update(std::int64_t step, double loss, std::int64_t samples) {
  step_ = step;
  loss_ = loss;
  samples_ += samples * sample_scale_;
  if (!due(step)) return;
  if (terminal_) {
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
  return since.count() >= (terminal_ ? 0.1 : interval_s_);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_ && terminal_) {
    fmt::print(out_, "\n");
    std::fflush(out_);
  }
}

}  // namespace dtrain::train
