// The serving side of dist::ParameterServer (private to dist): one loop on the calling
// thread that keeps a receive posted for every worker's control messages and for every
// piece it owns, waits for whichever completes (Communicator::wait_any: a short spin, then
// sleeps), and answers. See ps_protocol.h for the messages.
#pragma once

#include "dist/ps/ps_layout.h"
#include "dtrain/dist/ps/parameter_server.h"

#include <chrono>
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
  using Clock = std::chrono::steady_clock;

  void post(Slot& slot);
  void on_control(int w, const std::vector<double>& message);
  // `buffer`: the push as received (gradient, learning rate, skip flag).
  void on_push(int w, std::size_t local, const Tensor& buffer);
  void apply(Piece& piece, const Tensor& grad, double lr);
  // Sync: adds the gradient to its step's sum (or drops it when its step is done, sending
  // the worker the current values) and applies the mean once enough workers are in.
  void sync_push(int w, std::size_t local, const Tensor& grad, double lr, bool skip);
  // Async and ssp: applies the gradient, with the stale-gradient options.
  void stale_push(int w, std::size_t local, const Tensor& grad, double lr);
  void push_complete(int w);
  void grant_waiting();
  bool bound_allows() const;
  // Sends a copy of the piece's values (they change with the next push while the message
  // may still be in flight), or `values`, a copy already made.
  void send_piece(int w, std::size_t local);
  void send_piece(int w, std::size_t local, const Tensor& values);
  void send_all(int w);
  void reply_claim(int w, std::int64_t epoch, std::int64_t batches);
  void reply_stats(int w);
  void report_stalls();
  // Hands this server's share of the checkpoint of `step` to save_, then tells worker w.
  void save_share(int w, std::int64_t step);

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
  std::int64_t waiting_order_ = 0;
  int stopped_ = 0;
  // Server 0: the batch queue of the current epoch, and the staleness histogram.
  std::int64_t claim_epoch_ = -1, next_batch_ = 0;
  std::vector<std::int64_t> staleness_;
  std::int64_t staleness_max_ = 0;
  std::int64_t dropped_ = 0;  // sync with backup workers: late pushes
  // Stalled-worker reports: the mean time between a worker's pushes.
  double mean_step_s_ = 0;
};

}  // namespace dtrain::dist
