#include "dtrain/core/trace.h"

#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <utility>

namespace dtrain::trace {

namespace {

using Clock = std::chrono::steady_clock;

struct Event {
  std::string name;
  const char* category;
  char phase;  // 'X' complete, 'i' instant
  Clock::time_point start;
  std::int64_t duration_ns;
  std::int64_t bytes;
  int thread;
};

// Recorded events of every thread, and the threads' names. Events are few (tens per step),
// so one lock is cheap, and only taken while recording.
struct Recorder {
  std::atomic<bool> on{false};
  std::mutex mutex;
  std::vector<Event> events;
  std::vector<std::pair<int, std::string>> thread_names;
};
Recorder& recorder() {
  static Recorder r;
  return r;
}

int thread_index() {
  static std::atomic<int> next{1};
  thread_local const int index = next.fetch_add(1);
  return index;
}

thread_local PhaseTotals totals;
thread_local Span* innermost_phased = nullptr;
thread_local Clock::time_point mark;  // since_mark()'s start; set only while recording

void record(Event e) {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  r.events.push_back(std::move(e));
}

void append_escaped(std::string& out, std::string_view s) {
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += c;
    }
  }
}

}  // namespace

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::Data: return "data";
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Communication: return "communication";
    case Phase::Optimizer: return "optimizer";
  }
  return "?";
}

double PhaseTotals::compute() const {
  return (*this)[Phase::Forward] + (*this)[Phase::Backward] + (*this)[Phase::Optimizer];
}

PhaseTotals PhaseTotals::operator-(const PhaseTotals& earlier) const {
  PhaseTotals d;
  for (std::size_t i = 0; i < kPhases; ++i) d.seconds[i] = seconds[i] - earlier.seconds[i];
  return d;
}

PhaseTotals thread_totals() { return totals; }

Span::Span(std::string_view name, Phase phase)
    : category_(phase_name(phase)), bytes_(0), phased_(true), phase_(phase), start_(Clock::now()) {
  if (recording()) {
    name_ = name;
    mark = start_;
  }
  parent_ = std::exchange(innermost_phased, this);
}

// A traced-only span reads the clock only while recording: every collective opens one, and
// two clock reads were a tenth of a small collective's cost in dtrain.
Span::Span(std::string_view name, const char* category, std::int64_t bytes)
    : category_(category), bytes_(bytes), phased_(false) {
  if (!recording()) return;
  name_ = name;
  start_ = Clock::now();
  mark = start_;
}

Span::~Span() {
  if (!phased_ && name_.empty()) return;  // traced only, and not recorded
  const auto end = Clock::now();
  if (phased_) {
    const double seconds = std::chrono::duration<double>(end - start_).count();
    totals.seconds[static_cast<std::size_t>(phase_)] += seconds - nested_s_;
    if (parent_) parent_->nested_s_ += seconds;
    innermost_phased = parent_;
  }
  // A span that began before recording started has no name and is left out.
  if (!name_.empty() && recording()) {
    record({std::move(name_), category_, 'X', start_,
            std::chrono::duration_cast<std::chrono::nanoseconds>(end - start_).count(), bytes_, thread_index()});
    mark = end;
  }
}

void since_mark(std::string_view name, const char* category) {
  if (!recording()) return;
  const auto now = Clock::now();
  // A thread that has had no span while recording starts its marks here.
  const auto start = mark == Clock::time_point{} ? now : mark;
  record({std::string(name), category, 'X', start,
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - start).count(), 0, thread_index()});
  mark = now;
}

void instant(std::string_view name, const char* category) {
  if (!recording()) return;
  record({std::string(name), category, 'i', Clock::now(), 0, 0, thread_index()});
}

void start_recording() {
  Recorder& r = recorder();
  {
    std::lock_guard lock(r.mutex);
    r.events.clear();
  }
  r.on.store(true, std::memory_order_release);
}

void stop_recording() { recorder().on.store(false, std::memory_order_release); }

bool recording() { return recorder().on.load(std::memory_order_acquire); }

void name_thread(std::string_view name) {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  const int index = thread_index();
  for (auto& [thread, known] : r.thread_names) {
    if (thread == index) {
      known = name;
      return;
    }
  }
  r.thread_names.emplace_back(index, std::string(name));
}

std::string chrome_events(int pid, Clock::time_point origin) {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  std::string out;
  if (r.events.empty()) return out;
  const auto separate = [&out] {
    if (!out.empty()) out += ",\n";
  };
  for (const auto& [thread, name] : r.thread_names) {
    separate();
    out += fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":")", pid, thread);
    append_escaped(out, name);
    out += "\"}}";
  }
  for (const Event& e : r.events) {
    separate();
    // Microseconds with nanosecond decimals: Chrome's unit.
    const double ts = std::chrono::duration<double, std::micro>(e.start - origin).count();
    out += R"({"name":")";
    append_escaped(out, e.name);
    out +=
        fmt::format(R"(","cat":"{}","ph":"{}","pid":{},"tid":{},"ts":{:.3f})", e.category, e.phase, pid, e.thread, ts);
    if (e.phase == 'X') out += fmt::format(R"(,"dur":{:.3f})", static_cast<double>(e.duration_ns) / 1e3);
    if (e.phase == 'i') out += R"(,"s":"t")";
    if (e.bytes > 0) out += fmt::format(R"(,"args":{{"bytes":{}}})", e.bytes);
    out += '}';
  }
  return out;
}

std::string chrome_document(const std::vector<std::string>& events_per_rank, std::string_view process_label) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  for (std::size_t rank = 0; rank < events_per_rank.size(); ++rank) {
    if (events_per_rank[rank].empty()) continue;
    if (!first) out += ",\n";
    first = false;
    out += fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":")", rank);
    append_escaped(out, fmt::format("{} {}", process_label, rank));
    out += fmt::format(
        "\"}}}},\n{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},\"args\":{{\"sort_index\":{}}}}},\n", rank,
        rank);
    out += events_per_rank[rank];
  }
  out += "\n]}\n";
  return out;
}

}  // namespace dtrain::trace
