// PsServer, the workers' side of server 0's bookkeeping: the batch queue it hands out
// (claims, batches handed out again, the end of the batches), the answers to Leave at the
// end of a stretch, and workers found lost (watched, dropped, forgotten by every server).
#include "dist/ps/ps_protocol.h"
#include "dist/ps/ps_server.h"
#include "dist/ps/ps_server_state.h"
#include "dtrain/comm/peer_recovery.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace dtrain::dist {

using namespace ps_slot;  // NOLINT(google-build-using-namespace): the slot markers

void PsServer::reply_claim(int w, std::int64_t epoch, std::int64_t batches) {
  DTRAIN_CHECK(server_ == 0, "parameter server {}: worker {} claimed a batch from a server other than 0", server_, w);
  DTRAIN_CHECK(epoch >= claim_epoch_, "parameter server: worker {} claimed a batch of epoch {} during epoch {}", w,
               epoch + 1, claim_epoch_ + 1);
  if (epoch != claim_epoch_) {
    claim_epoch_ = epoch;
    next_batch_ = 0;
    returned_.clear();
    for (Worker& wk : workers_state_) wk.claimed.clear();
  }
  if (!returned_.empty()) {
    hand_again(w);
  } else if (next_batch_ < batches) {
    give(w, next_batch_++);
  } else {
    // None left, unless a worker holding some is lost: the claim waits until that cannot
    // happen any more (settle_claims).
    parked_.push_back(w);
    settle_claims();
  }
}

bool PsServer::parked(int w) const { return std::find(parked_.begin(), parked_.end(), w) != parked_.end(); }

void PsServer::give(int w, std::int64_t batch) {
  workers_state_[static_cast<std::size_t>(w)].claimed.push_back(batch);
  answer_claim(w, batch);
}

void PsServer::hand_again(int w) {
  give(w, returned_.front());
  returned_.pop_front();
  ++handed_again_;
}

void PsServer::answer_claim(int w, std::int64_t batch) {
  // A parked worker's silence so far was its wait for this answer.
  if (parked(w)) workers_state_[static_cast<std::size_t>(w)].last_push = Clock::now();
  comm_.send(Tensor::full({1}, static_cast<double>(batch), {DType::f64}), w, ps::kClaimTag);
}

void PsServer::settle_claims() {
  while (!parked_.empty() && !returned_.empty()) {
    hand_again(parked_.front());  // before it leaves parked_: its clock restarts
    parked_.erase(parked_.begin());
  }
  if (parked_.empty()) return;
  // The end, once every live worker that holds untrained batches waits here too: one that
  // computes may still be lost, and then its batches go to the claims waiting. (A waiting
  // worker may be blocked on this very claim, its next batch staged behind it, or
  // accumulating gradients over several, and push nothing until it is answered.)
  for (int w = 0; w < workers_; ++w) {
    const Worker& wk = workers_state_[static_cast<std::size_t>(w)];
    if (!wk.lost && !wk.stopped && !wk.claimed.empty() && !parked(w)) return;
  }
  for (int w : parked_) answer_claim(w, -1);  // the end
  parked_.clear();
}

void PsServer::answer_leaves() {
  std::vector<double> lost;
  for (const Worker& wk : workers_state_) {
    if (!wk.left && !wk.lost && !wk.stopped) return;
    lost.push_back(wk.lost ? 1.0 : 0.0);
  }
  // The stretch is over: what a lost worker left and nobody claimed stays untrained.
  missed_ += static_cast<std::int64_t>(returned_.size());
  returned_.clear();
  const Tensor answer = Tensor::from_vector(lost, {static_cast<std::int64_t>(lost.size())});
  for (int w = 0; w < workers_; ++w) {
    Worker& wk = workers_state_[static_cast<std::size_t>(w)];
    if (!wk.left) continue;
    wk.left = false;
    comm_.send(answer, w, ps::kLeaveTag);
  }
}

void PsServer::watch_workers() {
  const auto now = Clock::now();
  for (int w = 0; w < workers_; ++w) {
    Worker& wk = workers_state_[static_cast<std::size_t>(w)];
    if (wk.lost || parked(w) || !computing(wk)) continue;  // a parked one waits for us
    const double silent = std::chrono::duration<double>(now - last_heard(wk)).count();
    if (options_.lost_after.count() > 0 && silent >= std::chrono::duration<double>(options_.lost_after).count()) {
      drop(w, silent);
    } else if (mean_step_s_ > 0 && !wk.reported && silent >= std::max(1.0, 20 * mean_step_s_)) {
      spdlog::warn(
          "parameter server: worker {} (rank {}) has pushed nothing for {:.1f} s (a step takes {:.3f} s on "
          "average); the other workers go on",
          w, w, silent, mean_step_s_);
      wk.reported = true;
    }
  }
  settle_claims();
}

void PsServer::drop(int w, double silent_s) {
  Worker& wk = workers_state_[static_cast<std::size_t>(w)];
  const double limit = std::chrono::duration<double>(options_.lost_after).count();
  DTRAIN_CHECK(w != 0,
               "parameter server 0: the chief (worker 0, rank 0) has pushed nothing for {:.1f} s (a worker silent for "
               "{:.1f} s is lost): the job ends with it (dtrain-launch --max-restarts N restarts the job from its last "
               "checkpoint)",
               silent_s, limit);
  int live = 0;
  for (const Worker& other : workers_state_) live += other.lost || other.stopped ? 0 : 1;
  spdlog::warn(
      "parameter server: worker {} (rank {}) has pushed nothing for {:.1f} s (the limit is {:.1f} s): dropped "
      "as lost; training goes on with {} worker(s){}",
      w, w, silent_s, limit, live - 1,
      wk.claimed.empty()
          ? std::string()
          : fmt::format(", and the {} batch(es) it claimed and did not push go to the next claims", wk.claimed.size()));
  comm_.isend(Tensor::full({1}, 1.0, {DType::f64}), w, ps::kDroppedTag);  // for when it wakes; forgotten below
  for (int s = 1; s < static_cast<int>(options_.servers); ++s) {
    comm_.send(Tensor::full({1}, static_cast<double>(w), {DType::f64}), workers_ + s, ps::kLostTag);
  }
  returned_.insert(returned_.end(), wk.claimed.begin(), wk.claimed.end());
  wk.claimed.clear();
  std::erase(parked_, w);
  forget(w);
  settle_claims();
  answer_leaves();
}

void PsServer::forget(int w) {
  Worker& wk = workers_state_[static_cast<std::size_t>(w)];
  if (wk.lost) return;
  wk.lost = true;
  wk.state = Worker::State::Idle;
  wk.pushed = 0;
  wk.left = false;
  if (!wk.stopped) {
    wk.stopped = true;
    ++stopped_;
  }
  for (Slot& slot : slots_) {
    if (slot.worker == w && slot.local != kLostNotice) slot.work.reset();
  }
  peer_recovery(comm_, "parameter servers: a lost worker").forget_peer(w);
  wk.sends.clear();
  grant_waiting();
}

}  // namespace dtrain::dist
