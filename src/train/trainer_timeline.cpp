// The Trainer's view of where the time went: the per-epoch breakdown table and the
// timeline of --trace-steps (trainer.h, TraceOptions), gathered from every training rank.
#include "dtrain/train/trainer.h"

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

void Trainer::report_time(const std::vector<EpochSummary>& epochs) const {
  if (!strategy_->reports() || !options_.verbose || epochs.empty()) return;
  const auto cell = [](double part, double whole) {
    return fmt::format("{:8.2f} {:>6}", part, whole > 0 ? fmt::format("{:.1f}%", 100 * part / whole) : "-");
  };
  fmt::print(options_.out, "where the training time went on rank {} (seconds, share of the epoch):\n",
             strategy_->rank());
  fmt::print(options_.out, "{:>5} {:>9}  {:>15}  {:>15}  {:>15}  {:>15}\n", "epoch", "training", "compute",
             "exposed comm", "data wait", "other");
  for (const EpochSummary& e : epochs) {
    const double comm = e.time[trace::Phase::Communication], data = e.time[trace::Phase::Data];
    const double other = std::max(0.0, e.seconds - e.time.compute() - comm - data);
    fmt::print(options_.out, "{:>5} {:>9.2f}  {}  {}  {}  {}\n", e.epoch, e.seconds, cell(e.time.compute(), e.seconds),
               cell(comm, e.seconds), cell(data, e.seconds), cell(other, e.seconds));
  }
  std::fflush(options_.out);
}

void Trainer::trace_after_update() {
  if (options_.trace.file.empty()) return;
  if (global_step_ + 1 == options_.trace.first_step) {
    trace::start_recording();
    trace_started_ = Clock::now();
  } else if (global_step_ == options_.trace.last_step && trace::recording()) {
    trace::stop_recording();
    trace_pending_ = true;
  }
}

void Trainer::write_trace() {
  trace::stop_recording();
  trace_pending_ = false;
  trace_written_ = true;
  const int rank = strategy_->rank(), ranks = strategy_->ranks();
  // The ranks leave a collective together: times count from there, less the longest time
  // any rank has been recording, so that every event lies after 0 and the tracks line up.
  over_ranks(*strategy_, {0.0});
  const auto synced = Clock::now();
  std::vector<double> leads(static_cast<std::size_t>(ranks), 0.0);
  leads[static_cast<std::size_t>(rank)] = std::chrono::duration<double>(synced - trace_started_).count();
  leads = over_ranks(*strategy_, leads);
  const auto lead = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(*std::max_element(leads.begin(), leads.end())));
  const std::vector<std::string> events =
      gather_text(*strategy_, rank, ranks, trace::chrome_events(rank, synced - lead));
  if (!strategy_->reports()) return;
  std::ofstream file(options_.trace.file, std::ios::trunc);
  file << trace::chrome_document(events, "rank");
  file.close();
  DTRAIN_CHECK(file.good(), "--trace {}: writing the timeline failed", options_.trace.file.string());
  if (options_.verbose && global_step_ < options_.trace.first_step) {
    fmt::print(options_.out, "timeline {} holds no update: the run ended after update {}, before {}\n",
               options_.trace.file.string(), global_step_, options_.trace.first_step);
  } else if (options_.verbose) {
    fmt::print(options_.out, "timeline of updates {}-{} written to {} (open it in https://ui.perfetto.dev)\n",
               options_.trace.first_step, std::min(options_.trace.last_step, global_step_),
               options_.trace.file.string());
    std::fflush(options_.out);
  }
}

}  // namespace dtrain::train
