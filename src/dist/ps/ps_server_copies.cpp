// PsServer, rollback: copies of the server's pieces (values and optimizer state) that a
// worker asks for as the Trainer takes its snapshots, and the return to one when a worker's
// Trainer finds the loss diverged. Every server keeps the same copies (the worker that asks
// waits for all of them), so the servers return their shards to the same point together.
#include "dist/ps/ps_protocol.h"
#include "dist/ps/ps_server.h"
#include "dist/ps/ps_server_state.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace dtrain::dist {

PsServer::Copy PsServer::take_copy(std::int64_t id) const {
  Copy c{.id = id, .values = {}, .states = {}};
  for (const Piece& p : pieces_) {
    c.values.push_back(p.value.clone());
    optim::NamedTensors state;
    for (const auto& [name, t] : p.optimizer->state()) state.emplace_back(name, t.clone());
    c.states.push_back(std::move(state));
  }
  return c;
}

void PsServer::keep_copy(int w, std::int64_t id) {
  // The first copy (the start) stays: a rollback finds at least that one.
  if (copies_.size() >= 3) copies_.erase(copies_.begin() + 1);
  copies_.push_back(take_copy(id));
  comm_.send(Tensor::full({1}, 1.0, {DType::f64}), w, ps::kCopyTag);
}

bool PsServer::undone(int w) const { return workers_state_[static_cast<std::size_t>(w)].computed_from < generation_; }

void PsServer::restore_copy(int w, std::int64_t id) {
  const auto answer = [&](bool restored, std::int64_t copy) {
    comm_.send(Tensor::from_vector<double>({restored ? 1.0 : 0.0, static_cast<double>(copy)}, {2}), w, ps::kRestoreTag);
  };
  if (undone(w)) {
    // Its loss (of its latest push) came from values that a rollback has since taken back:
    // that rollback answered it already.
    answer(false, -1);
    return;
  }
  auto it = std::find_if(copies_.begin(), copies_.end(), [&](const Copy& c) { return c.id == id && id >= 0; });
  if (it == copies_.end()) it = copies_.size() >= 3 ? copies_.end() - 2 : copies_.end() - 1;
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    Piece& p = pieces_[i];
    p.value.copy_(it->values[i]);  // in place: the optimizer's parameters are views of it
    optim::NamedTensors state;
    for (const auto& [name, t] : it->states[i]) state.emplace_back(name, t.clone());
    p.optimizer->load_state(state);
  }
  ++generation_;
  if (server_ == 0) {
    spdlog::warn("parameter server 0: worker {} found the loss diverged; every server returns to copy {} (rollback {})",
                 w, it->id, generation_);
  }
  answer(true, it->id);
}

}  // namespace dtrain::dist
