// Where a training step's time goes. Code marks its work with spans:
//
//   { trace::Span s("backward", trace::Phase::Backward); loss.backward(); }
//   { trace::Span s("all_reduce", "communication", bytes); run(); }  // on a comm thread
//
// A span with a phase adds its exclusive time (less the phased spans nested inside it) to
// the calling thread's per-phase totals, always: a few clock reads per step. That is the
// Trainer's per-epoch breakdown (compute, exposed communication, data wait). While
// recording is on (a trace window), every span also becomes a Chrome trace event, which
// write_chrome_trace() turns into the JSON that Perfetto and chrome://tracing open.
// Recording is process-wide, so the communication threads' spans land beside the
// training thread's; each thread is a track, named by name_thread().
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::trace {

// What the training thread is doing. Communication is the time it waits for messages
// (exposed communication): an all-reduce that overlaps backward on another thread is not.
enum class Phase : std::uint8_t { Data, Forward, Backward, Communication, Optimizer };
inline constexpr std::size_t kPhases = 5;
const char* phase_name(Phase phase);  // "data", "forward", ...

// Seconds per phase, exclusive of nested phased spans.
struct PhaseTotals {
  std::array<double, kPhases> seconds{};
  double operator[](Phase p) const { return seconds[static_cast<std::size_t>(p)]; }
  double compute() const;  // forward + backward + optimizer
  PhaseTotals operator-(const PhaseTotals& earlier) const;
};
// The calling thread's totals since it started.
PhaseTotals thread_totals();

class Span {
 public:
  // Counted into `phase` and traced under its name as category.
  Span(std::string_view name, Phase phase);
  // Traced only, under `category`; `bytes` (when > 0) becomes an argument of the event.
  Span(std::string_view name, const char* category, std::int64_t bytes = 0);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  std::string name_;  // only kept while recording
  const char* category_;
  std::int64_t bytes_;
  bool phased_;
  Phase phase_{};
  Clock::time_point start_;
  double nested_s_ = 0;  // phased spans inside this one
  Span* parent_ = nullptr;
};

// A point in time on the calling thread's track (recorded only while recording).
void instant(std::string_view name, const char* category);

// An event on the calling thread's track from its mark to now, then the mark moves to now
// (recorded only while recording). Every span's start and end also set the mark. Autograd
// records each forward op this way when it makes the op's graph node, which is when the op
// has computed: the time since the previous op (or span edge) is this op's, the glue code
// between ops included. That is the forward half of the per-op table (tools/trace_ops.py).
void since_mark(std::string_view name, const char* category);

// Recording: process-wide. start_recording() also clears what an earlier window left.
void start_recording();
void stop_recording();
bool recording();
// The calling thread's track name in traces ("train", "comm world", ...).
void name_thread(std::string_view name);

// The events recorded so far, as the comma-separated Chrome trace-event objects of one
// process (pid = `pid`, a rank), with times in microseconds after `origin`: a moment the
// ranks agree on (taken right after a collective), so that their tracks line up. Thread
// name events come first. Empty when nothing was recorded.
std::string chrome_events(int pid, std::chrono::steady_clock::time_point origin);
// The Chrome trace-event JSON document holding `events` (chrome_events() of every rank,
// each non-empty piece separated by commas) and a process name per rank.
std::string chrome_document(const std::vector<std::string>& events_per_rank, std::string_view process_label);

}  // namespace dtrain::trace
