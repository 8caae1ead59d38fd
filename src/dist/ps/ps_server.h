// The serving side of dist::ParameterServer (private to dist): one loop on the calling
// thread that keeps a receive posted for every worker's control messages and for every
// piece it owns, waits for whichever completes (Communicator::wait_any: a short spin, then
// sleeps), and answers. See ps_protocol.h for the messages. ps_server.cpp holds the loop,
// pushes and values; ps_server_workers.cpp server 0's batch queue, the answers to Leave and
// lost workers; ps_server_state.h the state both use.
#pragma once

#include "dist/ps/ps_layout.h"
#include "dtrain/dist/ps/parameter_server.h"

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

namespace dtrain::dist {

class PsServer {
 public:
  // `values`: this server's pieces (layout.server_pieces[server]), flat, in order; updated
  // in place by a rebound copy of `prototype` per piece, over the piece's segments.
  // `param_dims`: each parameter's number of dimensions, by registration index (the
  // segments' shapes: slice_shape in comm/partition.h).
  // `states`: per piece, the optimizer state to start from (empty: fresh); `share` turns a
  // piece's optimizer state into the checkpoint's named entries; `save` receives them.
  PsServer(Communicator& comm, int workers, int server, const PsLayout& layout,
           const std::vector<std::int64_t>& param_dims, std::vector<Tensor> values, const PsOptions& options,
           const optim::Optimizer& prototype, std::vector<optim::NamedTensors> states,
           std::function<optim::NamedTensors(std::size_t piece, const optim::NamedTensors& state)> share,
           PsSaveShare save);
  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  // Until every worker has sent Stop.
  void run();

 private:
  struct Piece;
  struct Worker;
  struct Slot;
  struct Copy;
  using Clock = std::chrono::steady_clock;

  void post(Slot& slot);
  void on_control(int w, const std::vector<double>& message);
  // `buffer`: the push as received (gradient, learning rate, skip flag, batches).
  void on_push(int w, std::size_t local, const Tensor& buffer);
  void apply(Piece& piece, const Tensor& grad, double lr);
  // Sync: adds the gradient to its step's sum (or drops it when its step is done, sending
  // the worker the current values) and applies the mean once enough workers are in.
  void sync_push(int w, std::size_t local, const Tensor& grad, double lr, bool skip);
  // Sync: the gradients an update of the workers' stretch `stretch` (their joins) takes:
  // every worker's, or all but the backups', or with backup workers at the stretch's end
  // those of the workers that have not left it.
  std::int64_t contributors_needed(std::int64_t stretch) const;
  // Sync: applies the piece's open update and answers its contributors once it has the
  // gradients it needs.
  void complete_update(std::size_t local);
  // Async and ssp: applies the gradient, with the stale-gradient options.
  void stale_push(int w, std::size_t local, const Tensor& grad, double lr);
  // `batches`: the claimed batches the push trained (server 0 stops holding them for w).
  void push_complete(int w, std::int64_t batches);
  void grant_waiting();
  bool bound_allows() const;
  // Ssp with several servers: server 0 needs every server's holds to tell a worker that
  // computes from one that waits (computing), so each other server reports to it.
  bool reports_progress() const;
  // Server s > 0: tells server 0 worker w's pushes here and whether it holds w.
  void report_progress(int w);
  void on_progress(int s, const std::vector<double>& message);
  // Server 0: whether the worker's silence is its own (it computes or pushes), not a
  // wait for values that a server's bound holds back, or for nothing (idle).
  bool computing(const Worker& wk) const;
  // Server 0: its last push or grant here, or report from another server (its silence
  // starts there; the step times server 0 averages stay those of its own pushes).
  static Clock::time_point last_heard(const Worker& wk);
  // A copy of the piece's values (they change with the next push while the message may
  // still be in flight) and the rollback generation, as a values message.
  Tensor values_message(std::size_t local) const;
  // Sends the piece's values_message, or `message`, one already made.
  void send_piece(int w, std::size_t local);
  void send_piece(int w, std::size_t local, const Tensor& message);
  void send_all(int w);
  void reply_claim(int w, std::int64_t epoch, std::int64_t batches);
  // Hands `batch` to worker w (it holds it until a push trains it).
  void give(int w, std::int64_t batch);
  // Gives w the first batch a lost worker left.
  void hand_again(int w);
  // Sends w's claim its answer (a batch, or -1: none left).
  void answer_claim(int w, std::int64_t batch);
  bool parked(int w) const;  // its claim waits in parked_
  // Server 0: answers the claims parked at the end of the batches, with a batch a lost
  // worker left (handed out again) or, once no worker that computes holds any, with the end.
  void settle_claims();
  // Server 0: answers every Leave once each live worker has left.
  void answer_leaves();
  void reply_stats(int w);
  // Server 0 (async and ssp), after each message and at least every kWatchPoll: reports a
  // worker that has pushed nothing for a while (20 mean steps, at least 1 s), drops one
  // silent past lost_after, and settles the parked claims.
  void watch_workers();
  // Server 0: worker w is lost (silent for `silent_s`): tells it and the other servers,
  // hands its claimed batches out again. Throws for the chief.
  void drop(int w, double silent_s);
  // Every server: nothing waits on worker w any more (it counts as stopped).
  void forget(int w);
  // Hands this server's share of the checkpoint of `step` to save_, then tells worker w.
  void save_share(int w, std::int64_t step);
  // Rollback (ps_server_copies.cpp): keeps a copy of the pieces as copy `id` (the first
  // copy and the two latest are kept), then tells worker w.
  void keep_copy(int w, std::int64_t id);
  Copy take_copy(std::int64_t id) const;
  // Returns the pieces to copy `id` and starts a new generation; answers w (whether it did,
  // the copy, w's pushes since it, the generation). Server 0 (generation 0: it settles)
  // does not when the pushes whose losses found the trouble were computed from values of an
  // earlier generation than the current one, `computed_from` (another worker's Restore came
  // first, and took back what may have caused it); it picks `id` where kept, else the latest when
  // nothing was copied since the last rollback, else the older of the two latest. The others
  // follow server 0's answer: to copy `id` as `generation`, unless they are there already
  // (every worker that asked server 0 asks them, so none fetches values from before it).
  void restore_copy(int w, std::int64_t id, std::int64_t generation, std::int64_t computed_from);
  // Whether worker w's latest push was computed from values sent before the latest rollback
  // (it is then dropped, and w goes on from the restored values).
  bool undone(int w) const;

  Communicator& comm_;
  const int workers_;
  const int server_;
  const PsOptions options_;
  std::vector<Piece> pieces_;
  std::vector<Worker> workers_state_;
  std::vector<Slot> slots_;
  std::function<optim::NamedTensors(std::size_t, const optim::NamedTensors&)> share_;
  PsSaveShare save_;
  std::int64_t version_ = 0;  // completed pushes (sync: updates)
  // Rollback: the copies kept (the first, then the two latest), and the rollbacks so far.
  std::vector<Copy> copies_;
  std::int64_t generation_ = 0;
  std::int64_t restored_to_ = -1;      // the copy of the latest rollback
  bool copied_since_rollback_ = true;  // the latest copy is not the one a rollback returned to
  std::int64_t waiting_order_ = 0;
  int stopped_ = 0;
  int reporters_ = 0;  // server 0: the servers whose progress reports have not ended
  // Server 0: the batch queue of the current epoch, and the staleness histogram.
  std::int64_t claim_epoch_ = -1, next_batch_ = 0;
  std::vector<std::int64_t> staleness_;
  std::int64_t staleness_max_ = 0;
  std::int64_t dropped_ = 0;  // sync with backup workers: late pushes
  // Server 0, async and ssp: the batches lost workers left, to hand out first; how many
  // were; the workers whose claim waits at the end of the batches.
  std::deque<std::int64_t> returned_;
  std::int64_t handed_again_ = 0;
  std::int64_t missed_ = 0;  // left in returned_ when their stretch ended: not trained
  std::vector<int> parked_;
  // Stalled-worker reports: the mean time between a worker's pushes.
  double mean_step_s_ = 0;
};

}  // namespace dtrain::dist
