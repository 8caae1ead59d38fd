// DTRAIN_FAULT's kills and stops after an update (train/fault_injection.h) as an observer of
// the run. The Trainer keeps it after every other observer: the crash it simulates comes
// after everything an update does but its checkpoint.
#include "train/fault_injection.h"
#include "train/observers.h"

namespace dtrain::train {
namespace {

class FaultObserver : public TrainObserver {
 public:
  explicit FaultObserver(dist::Strategy& strategy) : strategy_(strategy) {}

  void on_epoch_start(const EpochStart&) override { done_ = 0; }
  void on_step_end(const StepEvent& e) override {
    fault::maybe_kill_at_step(strategy_.rank(), e.global_step, e.epoch, ++done_);
  }

 private:
  dist::Strategy& strategy_;
  std::int64_t done_ = 0;  // this rank's updates so far this epoch (kill-in-epoch counts these)
};

}  // namespace

std::shared_ptr<TrainObserver> make_fault_observer(dist::Strategy& strategy) {
  return std::make_shared<FaultObserver>(strategy);
}

}  // namespace dtrain::train
