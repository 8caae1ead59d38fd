// ParameterServer: training with parameter-server ranks, as tf.distribute's
// ParameterServerStrategy or MXNet's kvstore dist_sync/dist_async. Of a job's ranks, the
// first `workers` train (worker 0 is the chief: it evaluates and prints) and the last
// `servers` own the parameters: each server holds an equal share of the flat parameter
// vector (split by bytes; a parameter may straddle two servers) together with the
// optimizer state for it, applies the gradients the workers push, and sends the updated
// values back. A server is one thread waiting on its messages (sleeping when idle).
//
//   dist::ParameterServer ps(dist::world(), model, {.mode = dist::PsMode::Async, .servers = 1});
//   optim::SGD sgd(model->parameters(), {.lr = 0.05, .momentum = 0.9});
//   if (ps.is_server()) { ps.serve(sgd); return; }  // until every worker has shut down
//   ps.join();
//   while (auto b = ps.claim_batch(epoch, batches)) {  // batch *b of the epoch's order
//     sgd.zero_grad();
//     ps.begin_push(sgd.lr());                         // backward pushes buckets as they fill
//     cross_entropy(model->forward(x), y).backward();
//     ps.finish_push();                                // the servers' fresh parameters
//   }
//   ps.leave();
//   ps.sync_parameters();  // every worker: the parameters after every push
//   ps.shutdown();
//
// Modes (see README, "Parameter servers"):
// - Sync: each step the servers average one gradient from every worker and apply it: the
//   update of all-reduce data parallelism with the same global batch. Workers read fixed
//   shards of the data (with backup workers they claim batches, below).
// - Async: every push is applied when it arrives, each bucket on its own, and its updated
//   values go straight back to the worker that pushed it; no worker waits for another.
// - Ssp (bounded staleness, K): as async, but a worker receives fresh parameters (and so
//   starts its next step) only when every gradient still being computed would be applied
//   at most K updates after the values it was computed from.
// In async and ssp modes, and in sync mode with backup workers, batches are handed out at
// run time (claim_batch, from server 0), so a fast worker takes more of an epoch than a
// slow one; every batch is taken once (with backup workers a late one is not trained).
//
// Staleness: of a gradient applied on a server, the number of other workers' pushes the
// server applied between sending the values it was computed from and applying it (0 in
// sync mode). Server 0 counts every push in a histogram (staleness()).
//
// Transport: MPI point-to-point over a communicator split from the one given (parameters
// and gradients travel through host memory, so a model on a GPU works too, by copies).
// Failure: a message that outlives the communicator's timeout aborts the job naming the
// operation and peer. In async and ssp modes a worker that stalls does not hold the others
// up: server 0 reports it ("worker R has pushed nothing for S s"), and with lost_after it
// drops the worker and the others train on (see PsOptions::lost_after; the launch needs
// mpirun's --enable-recovery, which dtrain-launch --survive-lost-workers adds, or mpirun
// ends the job when a process dies). Losing the chief or a server ends the job.
#pragma once

#include "dtrain/comm/communicator.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/layers/module.h"
#include "dtrain/optim/optimizer.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::dist {

struct PsLayout;
struct PsPiece;
namespace ps {
enum class Control : std::int64_t;  // the workers' requests (private: ps_protocol.h)
}

enum class PsMode : std::uint8_t { Sync, Async, Ssp };

struct PsOptions {
  PsMode mode = PsMode::Async;
  int staleness = 0;                    // Ssp: the bound K >= 0
  int servers = 1;                      // the last `servers` ranks; at least one worker must remain
  std::size_t bucket_bytes = 1u << 20;  // gradient bytes per push message (at least)
  // Sync: backup workers (Chen et al. 2016, "Revisiting distributed synchronous SGD";
  // TensorFlow's SyncReplicasOptimizer): each update is the mean of the first
  // workers - backup_workers gradients computed from the values before it to reach a
  // server (for each of its pieces); a later one is dropped (its batch is not trained)
  // and its worker gets the current values to go on from, so a straggler stops setting the
  // pace. The workers claim their batches (claim_batch), so a straggler also trains fewer
  // of them and the epoch does not wait for it; at a stretch's end (leave) the last update
  // takes the gradients of the workers still training. 0 <= backup_workers < workers.
  int backup_workers = 0;
  // Async and ssp: how the servers make up for stale gradients (a gradient's staleness: the
  // updates applied since the worker read the values it computed it from).
  // staleness_lr: each gradient at its learning rate divided by its staleness (when above 1;
  // Zhang et al. 2016, "Staleness-aware async-SGD").
  bool staleness_lr = false;
  // delay_compensation: lambda >= 0 of DC-ASGD (Zheng et al. 2017): a gradient g computed at
  // the values w_sent that a server sent the worker is applied as g + lambda * g * g *
  // (w_now - w_sent), elementwise, a first-order step towards the gradient at w_now. The
  // servers keep each worker's w_sent: one more copy of their shard per worker. 0: off.
  double delay_compensation = 0;
  // Async and ssp: a worker that has pushed nothing for this long while it computes is
  // lost. Server 0 drops it (tells it, in case it wakes; the servers forget its messages),
  // hands the batches it claimed and did not push out again, and training goes on with the
  // others; the epoch's end and evaluation then run over the live workers. The chief
  // (worker 0) cannot be dropped: losing it ends the job. 0: never (a lost worker ends the
  // job at the end of the epoch, when the others wait for it). The trainers take half of
  // --timeout, so that a worker held by the staleness bound is released before its own
  // wait times out.
  std::chrono::milliseconds lost_after{0};
};

// "sync", "async" or "ssp:K" (K >= 0) into options.mode and options.staleness; throws
// naming the text otherwise.
void parse_ps_mode(const std::string& text, PsOptions& options);
// Throws naming the option when staleness_lr or delay_compensation is set in sync mode (its
// gradients are never stale), delay_compensation is negative or not finite, or
// backup_workers is negative or set outside sync mode, or lost_after is negative or set in
// sync mode.
void check_ps_options(const PsOptions& options);
std::string ps_mode_name(const PsOptions& options);
// The momentum to give the optimizer so that training with these workers behaves as
// `momentum` does synchronously. Asynchrony is momentum of its own (Mitliagkas et al. 2016,
// "Asynchrony begets momentum": W workers taking turns add an implicit momentum of about
// 1 - 1/W), and the two compound as (1 - total) = (1 - explicit) / W_eff, so this is
// max(0, 1 - W_eff * (1 - momentum)): 0.8 for 0.9 with 2 workers, 0.7 with 3, 0 from 10.
// W_eff: the gradients that can be in flight at once: the workers in async mode, at most
// K + 1 under ssp:K; sync mode returns `momentum` as it is.
double asynchronous_momentum(double momentum, const PsOptions& options, int workers);

// Staleness of the gradients applied on server 0: counts[k] gradients had staleness k,
// the last entry counting those at least counts.size() - 1.
struct StalenessStats {
  std::vector<std::int64_t> counts;
  std::int64_t max = 0;
  std::int64_t dropped = 0;       // sync with backup workers: pushes that came too late for their step
  std::int64_t handed_again = 0;  // batches a lost worker claimed and did not push, handed out again
  // Batches a lost worker left when no other worker would claim again in their stretch
  // (it was lost in the stretch's last steps): not trained in that epoch.
  std::int64_t missed = 0;
  std::int64_t total() const;
  double mean() const;  // the last bin counted at its lower bound
};

// A server's share of a checkpoint: the optimizer state of the parameter elements it owns,
// named "<parameter>[begin:end]/<buffer>" (a flat element range of the parameter),
// "<parameter>/updates", "lr" and "steps". The tensors are copies, the callee's to keep.
using PsSaveShare = std::function<void(std::int64_t step, optim::NamedTensors share)>;

class ParameterServer {
 public:
  // Collective over `world` (MPI; at least 2 ranks): checks that every rank's model has
  // the same parameters and buffers, gives all of them worker 0's values, and cuts the
  // parameters into the servers' shards. The model's trainable parameters must share one
  // floating dtype.
  ParameterServer(CommunicatorPtr world, std::shared_ptr<nn::Module> model, PsOptions options);
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  bool is_server() const;
  int workers() const { return workers_; }
  int servers() const { return options_.servers; }
  int worker_index() const;  // -1 on a server
  const PsOptions& options() const { return options_; }
  // The workers alone (for evaluation sums); null on a server.
  const CommunicatorPtr& worker_group() const { return worker_group_; }

  // ---- servers ----
  // Serves until every worker has called shutdown(), updating this server's shard with an
  // optimizer of `prototype`'s kind and options (Optimizer::rebind; the learning rate of
  // each update comes with the gradient). The shard starts from the model's values and
  // from the state `prototype` holds for them (a restored checkpoint's), cut to the shard.
  // `save` takes this server's share when worker 0 asks (request_save).
  void serve(const optim::Optimizer& prototype, PsSaveShare save = {});

  // ---- workers ----
  // Receives the parameters to start from (in ssp mode, once the bound allows).
  void join();
  // The next batch of `epoch` (0-based; the same on every worker) among `batches`, or
  // nullopt when all have been handed out. Async and ssp modes, sync with backup workers.
  std::optional<std::int64_t> claim_batch(std::int64_t epoch, std::int64_t batches);
  // Arms the push of the gradients of the next backward at learning rate `lr`: each bucket
  // is sent as soon as its gradients are complete, unless `deferred` (then finish_push
  // sends them all, after the caller has checked or clipped them).
  // `batches`: the claimed batches (claim_batch) this push trains, in the order claimed
  // (async and ssp: server 0 hands those a lost worker did not push out again).
  void begin_push(double lr, bool deferred = false, std::int64_t batches = 1);
  // Sends what backward did not (gradients a parameter never received count as zero),
  // and waits for the servers' updated parameters, which it copies into the model.
  // `skip`: the servers do not apply this gradient (inf/NaN under a loss scaler), yet
  // answer as for any push.
  void finish_push(bool skip = false);
  // No more pushes this epoch (after the last finish_push); join() starts the next.
  void leave();
  // After leave(), on every live worker: once every live worker has pushed its last
  // gradient (server 0 answers the leave), each receives the servers' current parameters,
  // so that all evaluate the same model. When workers were lost, worker_group() is then a
  // group of those left.
  void sync_parameters();
  // The workers lost so far (async and ssp with lost_after), as of the last sync_parameters.
  const std::vector<int>& lost_workers() const { return lost_workers_; }
  // Worker 0: server 0's histogram of the staleness of the gradients applied since the
  // previous call.
  StalenessStats staleness();
  // Tells the servers that this worker is done; serve() returns when every worker is.
  void shutdown();
  // Worker 0: every server hands its share of the checkpoint of `step` to its save
  // callback; returns when all have taken their copies (in sync mode no update can come in
  // between, since worker 0 has not pushed the next step's gradient).
  void request_save(std::int64_t step);
  // Rollback (train::GuardOptions). Every server keeps a copy of its shard (values and
  // optimizer state) as copy `id`: the first it had and the three latest copies are kept.
  // Returns when all have.
  void keep_copy(std::int64_t id);
  // Every server returns its shard to copy `id` (when no longer kept, or id < 0: the older
  // of the two latest), unless another worker's request did since the values that this
  // worker's latest `window` pushes were computed from (the pushes whose losses found the
  // trouble; this worker then waits until every server has); pushes computed from values
  // from before it are then dropped. Then this worker takes the servers' values. Returns the
  // copy returned to and how many of this worker's pushes server 0 had applied since it, or
  // nullopt when another worker's request had rolled the servers back already.
  std::optional<RemoteState::Restored> restore_copy(std::int64_t id, std::int64_t window);

 private:
  class Worker;
  void check_worker(const char* op) const;
  // Sends `kind` (with `a`, `b` and `c`) to servers `first` to `last` (-1: the last server)
  // and returns each one's answer: `words` f64 on `tag`.
  std::vector<std::vector<double>> ask_servers(ps::Control kind, double a, int tag, std::int64_t words, int first = 0,
                                               int last = -1, double b = 0, double c = 0);
  // Async and ssp with lost_after: a receive for server 0's notice that this worker was
  // dropped, and the departure check (set_departure_check) that reads it.
  void watch_for_drop();
  // Throws, saying so, when server 0 has dropped this worker.
  void check_not_dropped() const;
  // Waits for server 0's answer to leave() and, when workers were lost, makes the worker
  // group of those left.
  void take_leave_answer();
  // The state a server's optimizers start from, from the prototype's (per trainable
  // parameter): none when the prototype has not stepped (a fresh run).
  struct ServerState {
    optim::NamedTensors scalars;                         // lr, steps
    std::vector<std::int64_t> updates;                   // per parameter
    std::map<std::string, std::vector<Tensor>> buffers;  // name -> per parameter
  };
  ServerState prototype_state(const optim::Optimizer& prototype) const;
  optim::NamedTensors piece_state(const ServerState& proto, const PsPiece& piece) const;

  CommunicatorPtr comm_;          // split from world: this object's messages alone
  CommunicatorPtr worker_group_;  // the workers
  std::shared_ptr<nn::Module> model_;
  PsOptions options_;
  int workers_ = 0;
  std::unique_ptr<PsLayout> layout_;
  std::unique_ptr<Worker> worker_;
  std::vector<Variable> params_;  // trainable, registration order
  std::vector<std::string> param_names_;
  bool stopped_ = false;  // shut down (worker) or served (server)
  RecvWorkPtr dropped_notice_;
  Tensor dropped_notice_buffer_;
  RecvWorkPtr leave_answer_;
  Tensor leave_answer_buffer_;
  std::vector<int> live_workers_;  // the workers of worker_group_, by index
  std::vector<int> lost_workers_;
};

}  // namespace dtrain::dist
