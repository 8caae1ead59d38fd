// Progress reporting for a training loop: on a terminal, one line redrawn in place
// (step, loss, samples/s, ETA); otherwise plain lines at most every `interval_s`
// seconds, so logs stay readable. Disabled instances (other ranks) print nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace dtrain::train {

class Progress {
 public:
  Progress(std::string label, std::int64_t total_steps, bool enabled = true, std::FILE* out = stdout,
           double interval_s = 10.0);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // After step `step` (1-based) that processed `samples` samples with loss `loss`.
  void update(std::int64_t step, double loss, std::int64_t samples);
  // Counts a step's samples without printing (for a step after which due() was false).
  void count(std::int64_t samples) { samples_ += samples * sample_scale_; }
  // Whether update(step, ...) would print: a loop whose loss lives on a GPU reads it only
  // then. False when disabled.
  bool due(std::int64_t step) const;
  // Multiplies the samples of every update, e.g. by the number of data-parallel ranks so
  // that the rate shown is global.
  void set_sample_scale(std::int64_t scale) { sample_scale_ = scale; }
  // Ends the line (terminal) so that the next output starts cleanly; updates may follow
  // (after an evaluation line in the middle of an epoch).
  void finish();

  double samples_per_second() const;

 private:
  std::string render(bool terminal) const;

  std::string label_;
  std::int64_t total_;
  bool enabled_;
  std::FILE* out_;
  bool terminal_;
  double interval_s_;
  std::chrono::steady_clock::time_point start_, last_print_;
  std::int64_t step_ = 0;
  std::int64_t samples_ = 0;
  std::int64_t sample_scale_ = 1;
  double loss_ = 0;
  bool finished_ = false;
};

// "1:02:03" or "2:03".
std::string format_duration(double seconds);

}  // namespace dtrain::train
