// PsServer, rollback: copies of the server's pieces (values and optimizer state) that a
// worker asks for as the Trainer takes its snapshots, and the return to one when a worker's
// Trainer finds the loss diverged. Every server keeps the same copies (the worker that asks
// waits for all of them). A worker asks server 0 first, which settles which copy (and whether
// another worker's request came first), then the others for that copy by its id: so the
// servers return their shards to the same point together, whatever else is in flight.
#include "dist/ps/ps_protocol.h"
#include "dist/ps/ps_server.h"
#include "dist/ps/ps_server_state.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace dtrain::dist {

PsServer::Copy PsServer::take_copy(std::int64_t id) const {
  Copy c{.id = id, .values = {}, .states = {}, .pushes = {}};
  for (const Worker& wk : workers_state_) c.pushes.push_back(wk.pushes);
  for (const Piece& p : pieces_) {
    c.values.push_back(p.value.clone());
    optim::NamedTensors state;
    for (const auto& [name, t] : p.optimizer->state()) state.emplace_back(name, t.clone());
    c.states.push_back(std::move(state));
  }
  return c;
}

void PsServer::keep_copy(int w, std::int64_t id) {
  // The first copy (the start) stays: a rollback finds at least that one. Three latest: the
  // older of two that server 0 picks is still here when one more copy comes in between.
  if (copies_.size() >= 4) copies_.erase(copies_.begin() + 1);
  copies_.push_back(take_copy(id));
  copied_since_rollback_ = true;
  comm_.send(Tensor::full({1}, 1.0, {DType::f64}), w, ps::kCopyTag);
}

bool PsServer::undone(int w) const { return workers_state_[static_cast<std::size_t>(w)].computed_from < generation_; }

void PsServer::restore_copy(int w, std::int64_t id, std::int64_t generation, std::int64_t computed_from) {
  // Whether it restored, the copy, the worker's pushes since the copy (which the worker
  // counts its undone updates by: the copy's id counts the chief's steps), and the
  // generation the servers are to reach.
  const auto answer = [&](bool restored, std::int64_t undone_pushes) {
    comm_.send(Tensor::from_vector<double>({restored ? 1.0 : 0.0, static_cast<double>(restored_to_),
                                            static_cast<double>(undone_pushes), static_cast<double>(generation_)},
                                           {4}),
               w, ps::kRestoreTag);
  };
  if (generation > 0 ? generation_ >= generation : computed_from < generation_) {
    // Server 0: its losses came (some of them) from values that a rollback has since taken
    // back, which the worker now makes sure every server has reached. Another server:
    // another worker's request brought it there (or past) already.
    answer(false, 0);
    return;
  }
  auto it = copies_.end();
  if (generation > 0) {
    it = std::find_if(copies_.begin(), copies_.end(), [&](const Copy& c) { return c.id == id; });
    DTRAIN_CHECK(it != copies_.end(),
                 "parameter server {}: worker {} asked for copy {}, which this server no longer keeps", server_, w, id);
  } else {
    it = std::find_if(copies_.begin(), copies_.end(), [&](const Copy& c) { return c.id == id && id >= 0; });
    // Not named: the latest copy was taken after the last healthy loss its worker saw, maybe
    // after the trouble began: the one before it, unless the latest is where a rollback returned.
    if (it == copies_.end()) it = copied_since_rollback_ && copies_.size() >= 3 ? copies_.end() - 2 : copies_.end() - 1;
  }
  const std::size_t wi = static_cast<std::size_t>(w);
  const std::int64_t since = workers_state_[wi].pushes - it->pushes[wi];
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    Piece& p = pieces_[i];
    p.value.copy_(it->values[i]);            // in place: the optimizer's parameters are views of it
    p.optimizer->load_state(it->states[i]);  // copies what it keeps
  }
  // The copies after it belong to the trajectory just taken back; the pushes up to now are
  // undone, so that another return to it counts only those after this one.
  copies_.erase(it + 1, copies_.end());
  for (std::size_t v = 0; v < workers_state_.size(); ++v) it->pushes[v] = workers_state_[v].pushes;
  copied_since_rollback_ = false;
  restored_to_ = copies_.back().id;
  // Server 0 numbers the rollbacks; the others take its number (requests for an earlier one,
  // still in flight, then find it reached).
  generation_ = generation > 0 ? generation : generation_ + 1;
  // Sync updates still collecting gradients (backup workers) held gradients of the values
  // taken back: their contributors go on from the restored ones.
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    Piece& p = pieces_[i];
    for (int v : p.contributors) send_piece(v, i);
    p.contributors.clear();
    p.skip = false;
  }
  if (server_ == 0) {
    spdlog::warn("parameter server 0: worker {} found the loss diverged; every server returns to copy {} (rollback {})",
                 w, restored_to_, generation_);
  }
  answer(true, since);
}

}  // namespace dtrain::dist
