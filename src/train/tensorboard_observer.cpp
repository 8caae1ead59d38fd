// TensorBoard event files (TrainerOptions::tensorboard) as an observer of the run: the
// updates' loss and learning rate where the loss was read, the evaluations inside an epoch,
// and each epoch's figures at its last update.
#include "dtrain/train/tensorboard.h"
#include "train/observers.h"

namespace dtrain::train {
namespace {

class TensorBoardObserver : public TrainObserver {
 public:
  TensorBoardObserver(const std::filesystem::path& dir, RecordContext context) : writer_(dir), context_(context) {}

  // Only the losses someone read: asking for more would make a GPU wait at every update.
  void on_step_end(const StepEvent& e) override {
    if (!e.loss) return;
    writer_.add_scalar("train/loss", *e.loss, e.global_step);
    writer_.add_scalar("train/learning_rate", e.lr, e.global_step);
  }

  void on_evaluation(const EvalEvent& e) override {
    if (e.closes_epoch) return;  // in the epoch's scalars
    writer_.add_scalar("evaluation/test_loss", e.result.loss(), e.global_step);
    writer_.add_scalar("evaluation/test_accuracy", e.result.accuracy(), e.global_step);
  }

  void on_epoch_end(const EpochSummary& s) override {
    // At the epoch's last update, so that they line up with the step scalars.
    for (const auto& [name, value] : epoch_record(s, context_)) {
      if (name != "epoch" && name != "step") writer_.add_scalar("epoch/" + name, value, s.global_step);
    }
    writer_.flush();
  }

 private:
  TensorBoardWriter writer_;
  RecordContext context_;
};

}  // namespace

std::shared_ptr<TrainObserver> make_tensorboard_observer(const std::filesystem::path& dir, RecordContext context) {
  return std::make_shared<TensorBoardObserver>(dir, context);
}

}  // namespace dtrain::train
