#include "dist/ps/ps_server.h"

#include "dist/ps/ps_protocol.h"
#include "dist/ps/ps_server_state.h"
#include "dtrain/comm/peer_recovery.h"

#include <algorithm>

namespace dtrain::dist {

using namespace ps_slot;  // NOLINT(google-build-using-namespace): the slot markers

using ps::Control;

PsServer::PsServer(Communicator& comm, int workers, int server, const PsLayout& layout,
                   const std::vector<std::int64_t>& param_dims, std::vector<Tensor> values, const PsOptions& options,
                   const optim::Optimizer& prototype, std::vector<optim::NamedTensors> states,
                   std::function<optim::NamedTensors(std::size_t, const optim::NamedTensors&)> share, PsSaveShare save)
    : comm_(comm),
      workers_(workers),
      server_(server),
      options_(options),
      workers_state_(static_cast<std::size_t>(workers)),
      share_(std::move(share)),
      save_(std::move(save)) {
  const auto& mine = layout.server_pieces[static_cast<std::size_t>(server)];
  DTRAIN_CHECK(values.size() == mine.size(), "parameter server {}: {} value tensors for {} pieces", server,
               values.size(), mine.size());
  pieces_.resize(mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    Piece& p = pieces_[i];
    p.id = mine[i];
    p.length = layout.pieces[p.id].length;
    p.value = std::move(values[i]);
    for (const PsSegment& s : layout.pieces[p.id].segments) {
      p.segments.emplace_back(p.value.narrow(0, s.at, s.length)
                                  .reshape(slice_shape(s.length, static_cast<std::size_t>(param_dims[s.param]))),
                              true);
    }
    p.optimizer = prototype.rebind(p.segments);
    if (i < states.size() && !states[i].empty()) p.optimizer->load_state(states[i]);
  }
  if (server_ == 0) staleness_.assign(ps::kStalenessBins, 0);
  copies_.push_back(take_copy(-1));  // the start, where a rollback before any copy returns
  for (Worker& wk : workers_state_) {
    wk.piece_read.assign(pieces_.size(), 0);
    if (options_.delay_compensation > 0) wk.sent.resize(pieces_.size());
  }
  if (server_ > 0 && options_.mode != PsMode::Sync) {
    slots_.push_back(
        {.worker = workers_, .local = kLostNotice, .buffer = Tensor::empty({1}, {DType::f64}), .work = {}});
  }
  if (server_ == 0 && reports_progress()) {
    for (int s = 1; s < static_cast<int>(options_.servers); ++s) {
      slots_.push_back(
          {.worker = workers_ + s, .local = kProgress, .buffer = Tensor::empty({3}, {DType::f64}), .work = {}});
      ++reporters_;
    }
    for (Worker& wk : workers_state_) wk.elsewhere.resize(options_.servers - 1);
  }
  for (int w = 0; w < workers_; ++w) {
    slots_.push_back(
        {.worker = w, .local = kControl, .buffer = Tensor::empty({ps::kControlWords}, {DType::f64}), .work = {}});
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      const Tensor& v = pieces_[i].value;
      slots_.push_back({.worker = w,
                        .local = static_cast<std::ptrdiff_t>(i),
                        .buffer = Tensor::empty({pieces_[i].length + ps::kPushTrailer}, {v.dtype()}),
                        .work = {}});
    }
  }
}

PsServer::~PsServer() = default;

void PsServer::post(Slot& slot) {
  const int tag = slot.local == kLostNotice ? ps::kLostTag
                  : slot.local == kProgress ? ps::kProgressTag
                  : slot.local == kControl
                      ? ps::kControlTag
                      : ps::kPieceTag + static_cast<int>(pieces_[static_cast<std::size_t>(slot.local)].id);
  slot.work = comm_.irecv(slot.buffer, slot.worker, tag);
}

void PsServer::run() {
  for (Slot& s : slots_) post(s);
  std::vector<WorkPtr> live;
  std::vector<std::size_t> which;
  const bool watch = server_ == 0 && options_.mode != PsMode::Sync;
  PeerRecovery& mailboxes = peer_recovery(comm_, "parameter server");  // once, not per message
  // Server 0 also reads every other server's reports to the last (none is left unmatched).
  while (stopped_ < workers_ || reporters_ > 0) {
    live.clear();
    which.clear();
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].work) {
        live.push_back(slots_[i].work);
        which.push_back(i);
      }
    }
    const std::size_t first = watch ? mailboxes.wait_any_for(live, kWatchPoll) : mailboxes.wait_any(live);
    if (first < live.size()) {
      Slot& slot = slots_[which[first]];
      WorkPtr done = std::move(slot.work);
      done->wait();  // rethrows a failed receive
      const int w = slot.worker;
      if (slot.local == kLostNotice) {
        post(slot);
        forget(static_cast<int>(slot.buffer.item()));
      } else if (slot.local == kProgress) {
        const std::vector<double> message = slot.buffer.to_vector<double>();
        if (message[0] >= 0) post(slot);  // not the last
        on_progress(w - workers_, message);
      } else if (slot.local == kControl) {
        const std::vector<double> message = slot.buffer.to_vector<double>();
        if (static_cast<Control>(message[0]) != Control::Stop) post(slot);
        on_control(w, message);
      } else {
        on_push(w, static_cast<std::size_t>(slot.local), slot.buffer);
        post(slot);  // the buffer is consumed
      }
    }
    if (watch) watch_workers();
  }
  for (Worker& wk : workers_state_) {
    if (wk.lost) continue;  // its sends were left to MPI
    for (const WorkPtr& s : wk.sends) s->wait();
  }
  if (server_ > 0 && reports_progress()) {
    comm_.send(Tensor::from_vector(std::vector<double>{-1, 0, 0}, {3}), workers_, ps::kProgressTag);
  }
}

bool PsServer::reports_progress() const { return options_.mode == PsMode::Ssp && options_.servers > 1; }

void PsServer::report_progress(int w) {
  if (server_ == 0 || !reports_progress()) return;
  const Worker& wk = workers_state_[static_cast<std::size_t>(w)];
  const std::vector<double> message{static_cast<double>(w), static_cast<double>(wk.pushes),
                                    wk.state == Worker::State::InFlight ? 1.0 : 0.0};
  comm_.send(Tensor::from_vector(message, {3}), workers_, ps::kProgressTag);
}

void PsServer::on_progress(int s, const std::vector<double>& message) {
  if (message[0] < 0) {
    --reporters_;
    return;
  }
  Worker& wk = workers_state_[static_cast<std::size_t>(message[0])];
  if (wk.lost) return;  // sent before server s heard of it
  Worker::Elsewhere& there = wk.elsewhere[static_cast<std::size_t>(s - 1)];
  there.pushes = static_cast<std::int64_t>(message[1]);
  there.held = message[2] == 0;
  there.at = Clock::now();
}

PsServer::Clock::time_point PsServer::last_heard(const Worker& wk) {
  Clock::time_point t = wk.last_push;
  for (const Worker::Elsewhere& there : wk.elsewhere) t = std::max(t, there.at);
  return t;
}

bool PsServer::computing(const Worker& wk) const {
  if (wk.state == Worker::State::Idle) return false;
  // Each ssp server holds a worker by its own bound, and the servers may see the workers'
  // pushes in different orders: a worker granted here can be waiting for another server's
  // values (its silence that server's hold, maybe for a lost worker), or, held here, still
  // be pushing to another server.
  std::int64_t most = wk.pushes;
  for (const Worker::Elsewhere& there : wk.elsewhere) most = std::max(most, there.pushes);
  const bool owes_a_push = wk.pushes < most || std::ranges::any_of(wk.elsewhere, [&](const Worker::Elsewhere& there) {
                             return there.pushes < most;
                           });
  return owes_a_push || (wk.state == Worker::State::InFlight &&
                         std::ranges::none_of(wk.elsewhere, [](const Worker::Elsewhere& there) { return there.held; }));
}

void PsServer::on_control(int w, const std::vector<double>& message) {
  Worker& wk = workers_state_[static_cast<std::size_t>(w)];
  const auto kind = static_cast<Control>(message[0]);
  DTRAIN_CHECK(!wk.stopped, "parameter server {}: worker {} sent a message after shutting down", server_, w);
  switch (kind) {
    case Control::Join:
      DTRAIN_CHECK(wk.state == Worker::State::Idle, "parameter server {}: worker {} joined twice", server_, w);
      ++wk.joins;
      wk.state = Worker::State::Waiting;
      wk.waiting = ++waiting_order_;
      grant_waiting();
      if (wk.state == Worker::State::Waiting) report_progress(w);  // held (a grant reports itself)
      return;
    case Control::Leave:
      DTRAIN_CHECK(wk.pushed == 0, "parameter server {}: worker {} left in the middle of a push", server_, w);
      wk.state = Worker::State::Idle;
      wk.leaves = wk.joins;
      grant_waiting();
      if (options_.mode == PsMode::Sync) {
        for (std::size_t i = 0; i < pieces_.size(); ++i) complete_update(i);  // one fewer to wait for
      }
      if (server_ == 0) {
        wk.left = true;
        answer_leaves();
      }
      return;
    case Control::Fetch: send_all(w); return;
    case Control::Claim:
      reply_claim(w, static_cast<std::int64_t>(message[1]), static_cast<std::int64_t>(message[2]));
      return;
    case Control::Stats: reply_stats(w); return;
    case Control::Save: save_share(w, static_cast<std::int64_t>(message[1])); return;
    case Control::Copy: keep_copy(w, static_cast<std::int64_t>(message[1])); return;
    case Control::Restore:
      restore_copy(w, static_cast<std::int64_t>(message[1]), static_cast<std::int64_t>(message[2]),
                   static_cast<std::int64_t>(message[3]));
      return;
    case Control::Stop:
      wk.stopped = true;
      wk.state = Worker::State::Idle;
      wk.left = false;  // answered already, or never to be
      ++stopped_;
      grant_waiting();
      if (server_ == 0) answer_leaves();  // a stopped worker no longer holds the others' leave
      return;
  }
  DTRAIN_FAIL("parameter server {}: unknown message {} from worker {}", server_, message[0], w);
}

void PsServer::apply(Piece& piece, const Tensor& grad, double lr) {
  std::int64_t at = 0;  // the segments lie end to end in the piece (ps_layout)
  for (Variable& s : piece.segments) {
    const Tensor& d = s.data();
    s.set_grad(grad.narrow(0, at, d.numel()).reshape(d.shape()));
    at += d.numel();
  }
  piece.optimizer->set_lr(lr);
  piece.optimizer->step();
  piece.optimizer->zero_grad();
}

void PsServer::on_push(int w, std::size_t local, const Tensor& buffer) {
  Worker& wk = workers_state_[static_cast<std::size_t>(w)];
  Piece& piece = pieces_[local];
  DTRAIN_CHECK(wk.state == Worker::State::InFlight,
               "parameter server {}: worker {} pushed a gradient without parameters to compute it from (join first)",
               server_, w);
  const Tensor grad = buffer.narrow(0, 0, piece.length);
  const double lr = buffer.narrow(0, piece.length, 1).item();
  const bool skip = buffer.narrow(0, piece.length + 1, 1).item() != 0;
  wk.push_batches = static_cast<std::int64_t>(buffer.narrow(0, piece.length + 2, 1).item());
  if (wk.pushed == 0) wk.computed_from = static_cast<std::int64_t>(buffer.narrow(0, piece.length + 3, 1).item());
  // Computed from values a rollback took back: not applied, and the worker goes on from the
  // restored values.
  const bool taken_back = undone(w);
  if (options_.mode == PsMode::Sync) {
    if (taken_back) send_piece(w, local);
    else sync_push(w, local, grad, lr, skip);
  } else {
    if (!skip && !taken_back) stale_push(w, local, grad, lr);
    if (options_.mode == PsMode::Async) send_piece(w, local);  // at once: overlaps the rest of its push
  }
  if (++wk.pushed == pieces_.size()) push_complete(w, wk.push_batches);
}

void PsServer::sync_push(int w, std::size_t local, const Tensor& grad, double lr, bool skip) {
  Worker& wk = workers_state_[static_cast<std::size_t>(w)];
  Piece& piece = pieces_[local];
  if (wk.piece_read[local] < piece.updates) {
    // A backup worker's gradient, late: the update after the values it was computed from
    // was applied without it. The worker goes on from the current values.
    wk.late = true;
    send_piece(w, local);
    return;
  }
  DTRAIN_CHECK(wk.piece_read[local] == piece.updates,
               "parameter server {}: worker {} pushed a gradient of piece {} computed after update {}, but update {} "
               "is open",
               server_, w, piece.id, wk.piece_read[local], piece.updates + 1);
  if (piece.contributors.empty()) {
    piece.sum = grad.clone();
  } else {
    add_(piece.sum, grad);
  }
  piece.skip = piece.skip || skip;
  piece.lr = lr;
  piece.contributors.push_back(w);
  complete_update(local);
}

std::int64_t PsServer::contributors_needed(std::int64_t stretch) const {
  const std::int64_t first = workers_ - options_.backup_workers;
  if (options_.backup_workers == 0) return first;
  // Batches are handed out: at a stretch's end a worker that has left pushes no more this
  // stretch, and the last update takes those still training.
  std::int64_t training = 0;
  for (const Worker& wk : workers_state_) training += !wk.stopped && !wk.lost && wk.leaves < stretch ? 1 : 0;
  return std::min(first, training);
}

void PsServer::complete_update(std::size_t local) {
  Piece& piece = pieces_[local];
  if (piece.contributors.empty()) return;
  const std::int64_t stretch = workers_state_[static_cast<std::size_t>(piece.contributors.front())].joins;
  if (static_cast<std::int64_t>(piece.contributors.size()) < contributors_needed(stretch)) return;
  // Every worker's gradient of this step is in (or all but the backups'): their mean, as an
  // all-reduce gives.
  if (!piece.skip) {
    mul_(piece.sum, 1.0 / static_cast<double>(piece.contributors.size()));
    apply(piece, piece.sum, piece.lr);
  }
  ++piece.updates;
  piece.skip = false;
  const Tensor message = values_message(local);  // one copy for every worker
  for (int v : piece.contributors) send_piece(v, local, message);
  piece.contributors.clear();
}

void PsServer::stale_push(int w, std::size_t local, const Tensor& grad, double lr) {
  const Worker& wk = workers_state_[static_cast<std::size_t>(w)];
  Piece& piece = pieces_[local];
  const std::int64_t staleness = version_ - wk.read;
  if (options_.staleness_lr && staleness > 1) lr /= static_cast<double>(staleness);
  if (options_.delay_compensation == 0) {
    apply(piece, grad, lr);
    return;
  }
  // g + lambda * g * g * (w_now - w_sent), built in the drift's buffer
  Tensor compensated = sub(piece.value, wk.sent[local]);
  mul_(compensated, grad);
  mul_(compensated, grad);
  mul_(compensated, options_.delay_compensation);
  add_(compensated, grad);
  apply(piece, compensated, lr);
}

void PsServer::save_share(int w, std::int64_t step) {
  DTRAIN_CHECK(save_ != nullptr,
               "parameter server {}: worker {} asked for a checkpoint, but this server has no "
               "checkpoint directory (give every rank the same --checkpoint-dir)",
               server_, w);
  optim::NamedTensors all;
  for (const Piece& p : pieces_) {
    optim::NamedTensors named = share_(p.id, p.optimizer->state());
    all.insert(all.end(), std::make_move_iterator(named.begin()), std::make_move_iterator(named.end()));
  }
  save_(step, std::move(all));
  comm_.send(Tensor::full({1}, 1.0, {DType::f64}), w, ps::kSaveTag);
}

void PsServer::push_complete(int w, std::int64_t batches) {
  Worker& wk = workers_state_[static_cast<std::size_t>(w)];
  wk.pushed = 0;
  ++wk.pushes;
  for (std::int64_t b = 0; b < batches && !wk.claimed.empty(); ++b) wk.claimed.pop_front();
  // The last batches held may just have come in: the claims waiting for the end get it now
  // (in sync mode with backup workers the pusher may wait for them to leave).
  if (server_ == 0 && !parked_.empty()) settle_claims();
  const auto now = Clock::now();
  const double step_s = std::chrono::duration<double>(now - wk.last_push).count();
  mean_step_s_ = mean_step_s_ == 0 ? step_s : 0.9 * mean_step_s_ + 0.1 * step_s;
  wk.last_push = now;
  wk.reported = false;
  const std::int64_t staleness = options_.mode == PsMode::Sync ? 0 : version_ - wk.read;
  if (server_ == 0 && wk.late) {
    ++dropped_;
  } else if (server_ == 0) {
    ++staleness_[static_cast<std::size_t>(std::min<std::int64_t>(staleness, ps::kStalenessBins - 1))];
    staleness_max_ = std::max(staleness_max_, staleness);
  }
  wk.late = false;
  if (options_.mode == PsMode::Sync) return;
  ++version_;
  if (options_.mode == PsMode::Async) {
    wk.read = version_;  // its values went back piece by piece, the last one just now
    return;
  }
  wk.state = Worker::State::Waiting;
  wk.waiting = ++waiting_order_;
  grant_waiting();
  if (wk.state == Worker::State::Waiting) report_progress(w);  // held (a grant reports itself)
}

// Ssp: granting one more worker fresh values adds one gradient that may be applied before
// each of those still being computed. Worst case for gradient i: the updates applied since
// its values were read plus one for every other gradient in flight, each applied first.
bool PsServer::bound_allows() const {
  std::int64_t in_flight = 0, lag = 0;
  for (const Worker& wk : workers_state_) {
    if (wk.state != Worker::State::InFlight) continue;
    ++in_flight;
    lag = std::max(lag, version_ - wk.read);
  }
  return in_flight == 0 || lag + in_flight <= options_.staleness;
}

void PsServer::grant_waiting() {
  for (;;) {
    Worker* next = nullptr;
    int who = -1;
    for (int w = 0; w < workers_; ++w) {
      Worker& wk = workers_state_[static_cast<std::size_t>(w)];
      if (wk.state == Worker::State::Waiting && (next == nullptr || wk.waiting < next->waiting)) {
        next = &wk;
        who = w;
      }
    }
    if (next == nullptr || (options_.mode == PsMode::Ssp && !bound_allows())) return;
    next->state = Worker::State::InFlight;
    next->read = version_;
    next->last_push = Clock::now();
    send_all(who);
    report_progress(who);
  }
}

Tensor PsServer::values_message(std::size_t local) const {
  const Piece& piece = pieces_[local];
  Tensor message = Tensor::empty({piece.length + ps::kValuesTrailer}, {piece.value.dtype()});
  message.narrow(0, 0, piece.length).copy_(piece.value);
  message.narrow(0, piece.length, 1).fill_(static_cast<double>(generation_));
  return message;
}

void PsServer::send_piece(int w, std::size_t local) { send_piece(w, local, values_message(local)); }

void PsServer::send_piece(int w, std::size_t local, const Tensor& message) {
  Worker& wk = workers_state_[static_cast<std::size_t>(w)];
  // The worker has received what was sent before its last push, so these are done, or
  // nearly: never waited for, since a worker may be lost.
  if (wk.sends.size() >= 2 * pieces_.size()) std::erase_if(wk.sends, [](const WorkPtr& s) { return s->test(); });
  wk.sends.push_back(comm_.isend(message, w, ps::kPieceTag + static_cast<int>(pieces_[local].id)));
  wk.piece_read[local] = pieces_[local].updates;
  if (options_.delay_compensation > 0) {
    wk.sent[local] = message.narrow(0, 0, pieces_[local].length);  // never written: the worker's next point
  }
}

void PsServer::send_all(int w) {
  for (std::size_t i = 0; i < pieces_.size(); ++i) send_piece(w, i);
}

void PsServer::reply_stats(int w) {
  DTRAIN_CHECK(server_ == 0, "parameter server {}: worker {} asked a server other than 0 for staleness", server_, w);
  std::vector<double> message(staleness_.begin(), staleness_.end());
  message.push_back(static_cast<double>(staleness_max_));
  message.push_back(static_cast<double>(dropped_));
  message.push_back(static_cast<double>(handed_again_));
  message.push_back(static_cast<double>(missed_));
  comm_.send(Tensor::from_vector(message, {ps::kStatsWords}), w, ps::kStatsTag);
  std::fill(staleness_.begin(), staleness_.end(), 0);
  staleness_max_ = 0;
  dropped_ = 0;
  handed_again_ = 0;
  missed_ = 0;
}

}  // namespace dtrain::dist
