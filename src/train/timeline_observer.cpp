// The timeline of --trace-steps (TraceOptions, core/trace.h) as an observer of the run:
// recording from before update first_step to after last_step, then every training rank's
// events gathered and written by the reporting rank.
#include "train/observers.h"
#include "train/rank_sums.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <fstream>

namespace dtrain::train {
namespace {

using Clock = std::chrono::steady_clock;

// Every training rank's piece of text, through the strategy's sums (a collective over the
// training ranks): each rank writes its bytes into its own range of a vector of zeros. Slow
// per byte, but it needs no other channel and runs once per timeline.
std::vector<std::string> gather_text(dist::Strategy& strategy, int rank, int ranks, const std::string& mine) {
  std::vector<double> lengths(static_cast<std::size_t>(ranks), 0.0);
  lengths[static_cast<std::size_t>(rank)] = static_cast<double>(mine.size());
  lengths = over_ranks(strategy, lengths);
  std::vector<std::size_t> offsets(lengths.size() + 1, 0);
  for (std::size_t r = 0; r < lengths.size(); ++r) offsets[r + 1] = offsets[r] + static_cast<std::size_t>(lengths[r]);
  std::vector<std::string> texts(lengths.size());
  if (offsets.back() == 0) return texts;
  std::vector<double> bytes(offsets.back(), 0.0);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    bytes[offsets[static_cast<std::size_t>(rank)] + i] = static_cast<unsigned char>(mine[i]);
  }
  bytes = over_ranks(strategy, bytes);
  for (std::size_t r = 0; r < texts.size(); ++r) {
    for (std::size_t i = offsets[r]; i < offsets[r + 1]; ++i) texts[r] += static_cast<char>(bytes[i]);
  }
  return texts;
}

class TimelineObserver : public TrainObserver {
 public:
  TimelineObserver(dist::Strategy& strategy, const TraceOptions& trace, bool verbose, std::FILE* out)
      : strategy_(strategy), trace_(trace), verbose_(verbose), out_(out) {
    DTRAIN_CHECK(trace_.first_step >= 1 && trace_.first_step <= trace_.last_step,
                 "Trainer: trace steps {}-{}: expected 1 <= first <= last", trace_.first_step, trace_.last_step);
    if (strategy_.reports()) {
      // Fail now, not after the steps: the file is written at the end of an epoch.
      std::ofstream probe(trace_.file, std::ios::trunc);
      DTRAIN_CHECK(probe.good(), "--trace {}: cannot write the file", trace_.file.string());
    }
  }

  // A timeline from the first update starts here.
  void on_fit_start(const FitStart& f) override { after_update(f.global_step); }
  void on_step_end(const StepEvent& e) override { after_update(e.global_step); }

  // Ranks whose updates differ in number (handed-out batches) agree on when to write.
  void on_train_epoch_end(const EpochSummary&) override {
    if (!written_ && over_ranks(strategy_, {pending_ ? 1.0 : 0.0})[0] > 0) write();
  }

  void on_train_end(const FitResult&) override {
    if (!written_) write();  // the run ended inside the window
  }

 private:
  void after_update(std::int64_t global_step) {
    global_step_ = global_step;
    if (global_step + 1 == trace_.first_step) {
      trace::start_recording();
      started_ = Clock::now();
    } else if (global_step == trace_.last_step && trace::recording()) {
      trace::stop_recording();
      pending_ = true;
    }
  }

  void write() {
    trace::stop_recording();
    pending_ = false;
    written_ = true;
    const int rank = strategy_.rank(), ranks = strategy_.ranks();
    // The ranks leave a collective together: times count from there, less the longest time
    // any rank has been recording, so that every event lies after 0 and the tracks line up.
    over_ranks(strategy_, {0.0});
    const auto synced = Clock::now();
    std::vector<double> leads(static_cast<std::size_t>(ranks), 0.0);
    leads[static_cast<std::size_t>(rank)] = std::chrono::duration<double>(synced - started_).count();
    leads = over_ranks(strategy_, leads);
    const auto lead = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(*std::max_element(leads.begin(), leads.end())));
    const std::vector<std::string> events =
        gather_text(strategy_, rank, ranks, trace::chrome_events(rank, synced - lead));
    if (!strategy_.reports()) return;
    std::ofstream file(trace_.file, std::ios::trunc);
    file << trace::chrome_document(events, "rank");
    file.close();
    DTRAIN_CHECK(file.good(), "--trace {}: writing the timeline failed", trace_.file.string());
    if (verbose_ && global_step_ < trace_.first_step) {
      fmt::print(out_, "timeline {} holds no update: the run ended after update {}, before {}\n", trace_.file.string(),
                 global_step_, trace_.first_step);
    } else if (verbose_) {
      fmt::print(out_, "timeline of updates {}-{} written to {} (open it in https://ui.perfetto.dev)\n",
                 trace_.first_step, std::min(trace_.last_step, global_step_), trace_.file.string());
      std::fflush(out_);
    }
  }

  dist::Strategy& strategy_;
  TraceOptions trace_;
  bool verbose_;
  std::FILE* out_;
  std::int64_t global_step_ = 0;  // the latest update's
  bool pending_ = false;          // recorded, not yet written
  bool written_ = false;
  Clock::time_point started_;
};

}  // namespace

void parse_trace_steps(std::string_view text, TraceOptions& options) {
  const auto number = [text](std::string_view part) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    DTRAIN_CHECK(ec == std::errc() && end == part.data() + part.size() && v >= 1,
                 "--trace-steps '{}': expected A-B or A, global update numbers from 1", text);
    return v;
  };
  const std::size_t dash = text.find('-');
  options.first_step = number(text.substr(0, dash));
  options.last_step = dash == std::string_view::npos ? options.first_step : number(text.substr(dash + 1));
  DTRAIN_CHECK(options.first_step <= options.last_step, "--trace-steps '{}': the first update comes after the last",
               text);
}

std::shared_ptr<TrainObserver> make_timeline_observer(dist::Strategy& strategy, const TraceOptions& trace, bool verbose,
                                                      std::FILE* out) {
  return std::make_shared<TimelineObserver>(strategy, trace, verbose, out);
}

}  // namespace dtrain::train
