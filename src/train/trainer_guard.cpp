// The Trainer's guard (dtrain/train/guard.h): after an update whose loss is read, the loss
// agreed over the ranks that step together, the watch's verdict, snapshots, reports and
// rollback.
#include "dtrain/train/trainer.h"

#include "train/epoch_sums.h"
#include "train/rank_sums.h"
#include "train/run_guard.h"
#include "train/trainer_epoch.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace dtrain::train {

namespace {

const char* trouble_name(LossTrouble t) { return t == LossTrouble::Spike ? "spike" : "nonfinite"; }

std::string describe(const LossCheck& c, double spike_factor) {
  if (c.trouble == LossTrouble::Spike) {
    if (c.reference > c.median) {
      return fmt::format(
          "loss spike: {:.4g}, {:.1f}x {:.4g}, a tenth of the loss's starting level (the limit is {:g}x "
          "that or the running median {:.4g}, the larger)",
          c.loss, c.loss / c.reference, c.reference, spike_factor, c.median);
    }
    return fmt::format("loss spike: {:.4g}, {:.1f}x the running median {:.4g} (the limit is {:g}x)", c.loss,
                       c.loss / c.median, c.median, spike_factor);
  }
  return fmt::format("non-finite loss ({})", c.loss);
}

}  // namespace

void Trainer::make_guard() {
  guard_ = std::make_unique<Guard>(options_.guard, train_config_.scaler != nullptr, *strategy_, caps_);
}

bool Trainer::guard_checks(const Epoch& e, std::int64_t step) const {
  if (!guard_ || caps_.server) return false;
  // The same updates on every rank (ranks that step together check together): not where
  // this rank happens to read its loss.
  return global_step_ % guard_->options.check_every == 0 || step == e.updates;
}

void Trainer::set_update_lr(Epoch& e, std::int64_t position) {
  const bool cooling = guard_ && global_step_ + 1 <= guard_->cooldown_until;
  const double factor = guard_ ? guard_->options.lr_factor : 1;
  if (e.schedule) {
    const double lr = e.schedule->lr_at(static_cast<std::int64_t>(e.epoch - 1) * e.updates + position);
    e.optimizer.set_lr(cooling ? lr * factor : lr);
    return;
  }
  if (!guard_) return;
  std::optional<double>& before = guard_->unscheduled_lr;
  if (cooling && !before) {
    before = e.optimizer.lr();
    e.optimizer.set_lr(*before * factor);
  } else if (!cooling && before) {
    e.optimizer.set_lr(*before);
    before.reset();
  }
}

void Trainer::guard_snapshot(optim::Optimizer& optimizer, int epoch, std::int64_t step_in_epoch) {
  Guard& g = *guard_;
  g.last_snapshot = global_step_;
  if (g.remote) {
    // One rank asks the holders; where ranks step together all of them know the copy's id,
    // so that any of them can ask for the same one back.
    if (g.remote->keeps_copies()) g.remote->keep_copy(global_step_);
    if (g.remote->keeps_copies() || g.lockstep) g.remote_waiting = global_step_;
    return;
  }
  // The slot that is not the good one.
  g.waiting = g.good == 0 ? 1 : 0;
  StateSnapshot& s = g.local[static_cast<std::size_t>(g.waiting)];
  s.take(*strategy_, g.plan, optimizer);
  s.global_step = global_step_;
  s.epoch = epoch;
  s.step_in_epoch = step_in_epoch;
}

void Trainer::guard_start(optim::Optimizer& optimizer, int epoch) {
  if (!guard_ || caps_.server) return;
  // The state the run starts from is good by definition: nothing has trained it yet.
  guard_snapshot(optimizer, epoch, resume_step_);
  Guard& g = *guard_;
  g.last_check = global_step_;
  g.good = g.waiting;
  g.waiting = -1;
  g.remote_good = g.remote_waiting;
  g.remote_waiting = -1;
}

void Trainer::guard_begin_epoch(Epoch& e) {
  if (!guard_) return;
  guard_->healthy_sums = e.sums.values();  // where a rollback before any healthy check returns
  guard_->nonfinite_seen = e.sums.nonfinite();
}

bool Trainer::guard_update(Epoch& e, const dist::StepStats& stats, std::int64_t step) {
  Guard& g = *guard_;
  const std::int64_t window = std::max<std::int64_t>(global_step_ - g.last_check, 1);  // the updates this check covers
  g.last_check = global_step_;
  // This rank's loss, then the mean over the ranks that step together (pipeline stages
  // without the loss add nothing); non-finite on any rank, at this update or at one since the
  // last check (on a GPU), is non-finite for all. A non-finite gradient norm under a loss
  // scaler is an overflow the scaler skipped, not divergence.
  double loss = stats.loss.defined() ? stats.loss.item() : 0;
  const std::int64_t nonfinite = e.sums.nonfinite();
  const bool bad_loss = !std::isfinite(loss) || nonfinite > g.nonfinite_seen;
  const bool bad_norm = !train_config_.scaler && stats.grad_norm && !std::isfinite(*stats.grad_norm);
  g.nonfinite_seen = nonfinite;
  std::vector<double> v{bad_loss ? 0.0 : loss, stats.loss.defined() && !bad_loss ? 1.0 : 0.0, bad_loss ? 1.0 : 0.0,
                        bad_norm ? 1.0 : 0.0};
  if (g.lockstep) v = over_ranks(*strategy_, v);
  if (v[2] > 0 || v[3] > 0) {
    loss = std::numeric_limits<double>::quiet_NaN();
  } else if (v[1] > 0) {
    loss = v[0] / v[1];
  } else {
    return false;  // no loss anywhere (cannot happen: some stage computes it)
  }
  const LossCheck c = g.watch.observe(global_step_, loss);
  if (!c.report.empty()) {
    const std::string text = fmt::format(
        "step {}: {}; training goes on (the guard rolls back on a non-finite loss "
        "or a spike only)",
        global_step_, c.report);
    guard_say(text);
    const GuardEvent warning{.kind = GuardEvent::Kind::Warning,
                             .global_step = global_step_,
                             .text = text,
                             .loss = c.loss,
                             .running_median = g.watch.median(),
                             .trouble = c.report_kind[0] == 's' ? "stalled" : "growing"};
    notify([&](TrainObserver& o) { o.on_guard(warning); });
  }
  if (c.trouble == LossTrouble::None) {
    // The waiting snapshot was taken before this update: a healthy loss from it makes it good.
    if (g.waiting >= 0) {
      g.good = g.waiting;
      g.waiting = -1;
    }
    if (g.remote_waiting >= 0) {
      g.remote_good = g.remote_waiting;
      g.remote_waiting = -1;
    }
    g.healthy_sums = e.sums.values();
    if (global_step_ - g.last_snapshot >= g.options.snapshot_every) guard_snapshot(e.optimizer, e.epoch, step);
    return false;
  }
  const std::string what = v[2] == 0 && v[3] > 0 && c.trouble == LossTrouble::NonFinite
                               ? "non-finite gradient norm"
                               : describe(c, g.options.spike_factor);
  DTRAIN_CHECK(g.options.rollback, "training diverged at step {}: {}; rollback is off (--no-rollback): stopping",
               global_step_, what);
  DTRAIN_CHECK(g.rollbacks < g.options.max_rollbacks,
               "training diverged at step {}: {}, after {} rollback(s), the most allowed (--max-rollbacks): "
               "stopping (lower the learning rate?)",
               global_step_, what, g.rollbacks);
  guard_rollback(e, c, what, window);
  return true;
}

void Trainer::guard_rollback(Epoch& e, const LossCheck& c, const std::string& what, std::int64_t window) {
  Guard& g = *guard_;
  std::int64_t undone = 0;  // this rank's updates taken back
  std::int64_t to = 0;      // the global step the snapshot was taken after
  std::string where;
  if (g.remote) {
    const std::optional<dist::RemoteState::Restored> restored = g.remote->restore_copy(g.remote_good, window);
    g.remote_waiting = -1;
    if (!restored && !g.lockstep) {
      // Another worker's rollback came first; this worker took its values.
      guard_say(
          fmt::format("step {}: {}; another worker's rollback had already returned the servers to an "
                      "earlier copy: this worker goes on from it",
                      global_step_, what));
      g.forget_trouble(e.sums);
      return;
    }
    // In lockstep another rank's request was this one, and the copy's id is this rank's step.
    to = restored ? restored->copy : g.remote_good;
    undone = restored && !g.lockstep ? restored->undone : global_step_ - std::max<std::int64_t>(to, 0);
    where = to < 0       ? std::string("the servers' starting copy")
            : g.lockstep ? fmt::format("the servers' copy after global step {}", to)
                         : fmt::format("the servers' copy after the chief's step {}", to);
  } else {
    const StateSnapshot& s = g.local[static_cast<std::size_t>(g.good)];
    const double lr = e.optimizer.lr();  // the snapshot's may be a cooldown's, or not one
    s.restore(*strategy_, g.plan, e.optimizer);
    e.optimizer.set_lr(lr);
    g.waiting = -1;
    to = s.global_step;
    undone = global_step_ - to;
    where = fmt::format("the snapshot after step {} (epoch {}, update {})", to, s.epoch, s.step_in_epoch);
  }
  ++g.rollbacks;
  ++e.rollbacks;
  g.forget_trouble(e.sums);
  g.last_snapshot = global_step_;  // the next snapshot comes a whole stretch later
  if (g.options.cooldown > 0 && g.options.lr_factor < 1) g.cooldown_until = global_step_ + g.options.cooldown;
  undone = std::clamp<std::int64_t>(undone, 0, global_step_);
  const std::int64_t first = global_step_ - undone + 1;
  const std::string text = fmt::format(
      "step {}: {}; rolled back to {}: {}{} (rollback {} of at most {})", global_step_, what, where,
      undone == 0 ? std::string("none of this rank's updates undone")
                  : fmt::format("{} update(s) undone, the batches of steps {}-{} skipped", undone, first, global_step_),
      g.cooldown_until > global_step_
          ? fmt::format(", the next {} updates at {:g}x the learning rate", g.options.cooldown, g.options.lr_factor)
          : "",
      g.rollbacks, g.options.max_rollbacks);
  guard_say(text);
  const GuardEvent rollback{.kind = GuardEvent::Kind::Rollback,
                            .global_step = global_step_,
                            .text = text,
                            .loss = c.loss,
                            .running_median = c.median,
                            .trouble = trouble_name(c.trouble),
                            .restored_step = to,
                            .skipped_from = first,
                            .skipped_to = global_step_,
                            .rollbacks = g.rollbacks};
  notify([&](TrainObserver& o) { o.on_guard(rollback); });
}

void Trainer::guard_say(const std::string& text) {
  if (strategy_->reports()) {
    if (!options_.verbose) return;
    notify([](TrainObserver& o) { o.on_pause(); });  // a progress line ends before this one
    fmt::print(options_.out, "{}\n", text);
    std::fflush(options_.out);
  } else if (!guard_->lockstep) {
    spdlog::warn("{}", text);  // a worker that decides alone: the reporting rank does not know
  }
}

}  // namespace dtrain::train
