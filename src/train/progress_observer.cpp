// The progress display (train/progress.h) as an observer of the run: one Progress per epoch,
// which asks for the loss of the updates whose line is due, and ends its line whenever the
// epoch's updates pause (an evaluation, the guard's line, the epoch's end, an error).
#include "train/observers.h"

#include <fmt/format.h>

#include <optional>

namespace dtrain::train {
namespace {

class ProgressObserver : public TrainObserver {
 public:
  ProgressObserver(std::FILE* out, ProgressMode mode) : out_(out), mode_(mode) {}

  void on_epoch_start(const EpochStart& e) override {
    progress_.reset();
    progress_.emplace(fmt::format("epoch {}/{}", e.epoch, e.epochs), e.updates, true, out_, 10.0, mode_);
    progress_->set_sample_scale(e.shards);
    shown_loss_ = 0;
  }

  // Progress::due looks at the clock: the answer given here is the one on_step_end keeps to,
  // since the loss was read (or not) by it.
  bool wants_loss(const StepPosition& at) override {
    due_ = progress_ && progress_->due(at.step);
    return due_;
  }

  void on_step_end(const StepEvent& e) override {
    if (!progress_) return;
    if (e.loss) shown_loss_ = *e.loss;  // the latest loss read, shown until the next one
    if (due_) progress_->update(e.step, shown_loss_, e.stats->samples);
    else progress_->count(e.stats->samples);
  }

  void on_pause() override {
    if (progress_) progress_->finish();
  }

  void on_exception(const std::exception_ptr&) override { progress_.reset(); }  // ends its line

 private:
  std::FILE* out_;
  ProgressMode mode_;
  std::optional<Progress> progress_;  // the epoch's
  bool due_ = false;                  // for the update being reported
  double shown_loss_ = 0;
};

}  // namespace

std::shared_ptr<TrainObserver> make_progress_observer(std::FILE* out, ProgressMode mode) {
  return std::make_shared<ProgressObserver>(out, mode);
}

}  // namespace dtrain::train
