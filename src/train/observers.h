// The Trainer's own observers (private to train; the hooks: dtrain/train/observer.h), which
// it registers from its options in make_outputs(). Each lives in a file of its own:
// metrics_observer.cpp, tensorboard_observer.cpp, progress_observer.cpp,
// timeline_observer.cpp, fault_observer.cpp.
#pragma once

#include "dtrain/train/observer.h"
#include "dtrain/train/progress.h"
#include "dtrain/train/trainer.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::train {

// What the metrics file and TensorBoard record of a run besides the summary: the Trainer's
// metrics (filled in after the observers are made; the first names the training accuracy)
// and whether there is a test set.
struct RecordContext {
  const std::vector<Metric>* metrics = nullptr;
  bool has_test = false;
};

// The figures of an epoch's "epoch" record, in the metrics file's order (TensorBoard's
// "epoch/<name>" scalars are the same but "epoch" and "step").
std::vector<std::pair<std::string, double>> epoch_record(const EpochSummary& s, const RecordContext& context);

// JSON lines (MetricsLog) of `file`: an "epoch" record per epoch, an "evaluation" per
// evaluation inside an epoch, the guard's "divergence" and "rollback" records, and the
// strategy's "summary" at the end. Opens (truncates) the file now.
std::shared_ptr<TrainObserver> make_metrics_observer(const std::filesystem::path& file, RecordContext context);
// TensorBoard event files in `dir`: the loss and learning rate of the updates whose loss was
// read, the evaluations inside an epoch, and each epoch's figures.
std::shared_ptr<TrainObserver> make_tensorboard_observer(const std::filesystem::path& dir, RecordContext context);
// The progress display (train/progress.h) of each epoch on `out`: it asks for the loss of
// the updates whose line is due.
std::shared_ptr<TrainObserver> make_progress_observer(std::FILE* out, ProgressMode mode);
// The timeline of TraceOptions: recording starts before update first_step and stops after
// last_step; the training ranks' events are gathered (a collective over them) at the end
// of the epoch in which it stopped, or of training, and the reporting rank writes them.
// Checks the steps, and (on the reporting rank) that the file can be written, now.
std::shared_ptr<TrainObserver> make_timeline_observer(dist::Strategy& strategy, const TraceOptions& trace, bool verbose,
                                                      std::FILE* out);
// DTRAIN_FAULT's kills and stops after an update (train/fault_injection.h), on the rank it
// names.
std::shared_ptr<TrainObserver> make_fault_observer(dist::Strategy& strategy);

}  // namespace dtrain::train
