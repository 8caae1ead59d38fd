// Progress reporting for a training loop: a bar redrawn in place (step, loss, samples/s,
// ETA), or plain lines at most every `interval_s` seconds so that logs stay readable, or
// nothing. Disabled instances (other ranks) print nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace dtrain::train {

// Auto: a bar where the output reaches a person's terminal, lines otherwise. Under mpirun
// a rank's stdout is a pseudo-terminal even when the job's output goes to a file, so
// there the terminal that counts is the launcher's (see output_is_terminal).
enum class ProgressMode { Auto, Bar, Lines, None };
// "auto", "bar", "lines" or "none"; anything else throws, naming the choices.
ProgressMode parse_progress_mode(std::string_view text);
// Whether `out` ends on a terminal. Under an MPI launcher (Open MPI, MPICH, PMIx, Slurm)
// the rank's own descriptor is the launcher's relay, so the answer is whether the
// launcher's standard output (the parent process's) is a terminal; where that cannot be
// read, false: lines are safe in a log and still readable on a terminal.
bool output_is_terminal(std::FILE* out);

class Progress {
 public:
  Progress(std::string label, std::int64_t total_steps, bool enabled = true, std::FILE* out = stdout,
           double interval_s = 10.0, ProgressMode mode = ProgressMode::Auto);
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
  bool bar_;  // a bar redrawn in place (else plain lines)
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
