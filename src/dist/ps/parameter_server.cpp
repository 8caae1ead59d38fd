#include "dtrain/comm/peer_recovery.h"
#include "dtrain/dist/ps/parameter_server.h"

#include "dist/ps/ps_layout.h"
#include "dist/ps/ps_push_exchange.h"
#include "dist/ps/ps_protocol.h"
#include "dist/ps/ps_server.h"
#include "dist/data_parallel/reducer.h"
#include "dist/strategy/replica_state.h"
#include "dtrain/core/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>

namespace dtrain::dist {

using ps::Control;

void parse_ps_mode(const std::string& text, PsOptions& options) {
  if (text == "sync") {
    options.mode = PsMode::Sync;
    return;
  }
  if (text == "async") {
    options.mode = PsMode::Async;
    return;
  }
  if (text.starts_with("ssp:")) {
    int k = -1;
    const char* first = text.data() + 4;
    const char* last = text.data() + text.size();
    const auto [end, error] = std::from_chars(first, last, k);
    if (error == std::errc() && end == last && first != last && k >= 0) {
      options.mode = PsMode::Ssp;
      options.staleness = k;
      return;
    }
  }
  DTRAIN_FAIL("parameter server mode '{}': expected sync, async or ssp:K with K an integer >= 0 (the staleness bound)",
              text);
}

void check_ps_options(const PsOptions& options) {
  DTRAIN_CHECK(std::isfinite(options.delay_compensation) && options.delay_compensation >= 0,
               "parameter server: delay compensation {} must be a number >= 0 (DC-ASGD's lambda; 0: off)",
               options.delay_compensation);
  DTRAIN_CHECK(options.mode != PsMode::Sync || (!options.staleness_lr && options.delay_compensation == 0),
               "parameter server: {} is for the async and ssp modes; in sync mode no gradient is stale",
               options.staleness_lr ? "the staleness-aware learning rate (stale_lr)" : "delay compensation (dc)");
  DTRAIN_CHECK(options.backup_workers >= 0, "parameter server: backup workers {}: must be >= 0",
               options.backup_workers);
  DTRAIN_CHECK(options.lost_after.count() >= 0, "parameter server: lost_after must be >= 0 (0: never)");
  DTRAIN_CHECK(options.lost_after.count() == 0 || options.mode != PsMode::Sync,
               "parameter server: dropping lost workers (lost_after, lost=) is for the async and ssp modes; in sync "
               "mode every update waits for every worker (backup workers spare a straggler there)");
  DTRAIN_CHECK(options.backup_workers == 0 || options.mode == PsMode::Sync,
               "parameter server: backup workers (backup={}) are for sync mode, whose updates wait for every "
               "worker; async and ssp never wait for a straggler",
               options.backup_workers);
}

std::string ps_mode_name(const PsOptions& options) {
  switch (options.mode) {
    case PsMode::Sync: return "sync";
    case PsMode::Async: return "async";
    case PsMode::Ssp: return fmt::format("ssp:{}", options.staleness);
  }
  return "?";
}

double asynchronous_momentum(double momentum, const PsOptions& options, int workers) {
  DTRAIN_CHECK(momentum >= 0 && momentum < 1, "asynchronous_momentum: momentum must lie in [0, 1), got {}", momentum);
  DTRAIN_CHECK(workers >= 1, "asynchronous_momentum: workers must be >= 1, got {}", workers);
  if (options.mode == PsMode::Sync) return momentum;
  const int in_flight = options.mode == PsMode::Ssp ? std::min(workers, options.staleness + 1) : workers;
  return std::max(0.0, 1.0 - static_cast<double>(in_flight) * (1.0 - momentum));
}

std::int64_t StalenessStats::total() const {
  std::int64_t n = 0;
  for (std::int64_t c : counts) n += c;
  return n;
}

double StalenessStats::mean() const {
  double sum = 0;
  for (std::size_t k = 0; k < counts.size(); ++k) sum += static_cast<double>(k) * static_cast<double>(counts[k]);
  const std::int64_t n = total();
  return n ? sum / static_cast<double>(n) : 0;
}

// The worker's side: the gradient reducer, whose exchange pushes each bucket as backward
// fills it (ps_push_exchange.h), and the receives of the servers' values.
class ParameterServer::Worker {
 public:
  Worker(Communicator& comm, int workers, PsLayout layout, std::vector<std::pair<std::string, Variable>> named,
         DType dtype, std::size_t bucket_bytes)
      : comm_(comm), workers_(workers), layout_(std::move(layout)) {
    std::vector<std::string> names;
    for (const auto& [name, p] : named) {
      names.push_back(name);
      params_.push_back(p);
    }
    for (const PsPiece& piece : layout_.pieces)
      values_.push_back(Tensor::empty({piece.length + ps::kValuesTrailer}, {dtype}));
    auto exchange = std::make_unique<PsPushExchange>(comm_, workers_, layout_, std::move(names), dtype);
    push_ = exchange.get();
    reducer_ = std::make_unique<GradientReducer>(std::move(named), std::move(exchange),
                                                 ReducerOptions{.bucket_bytes = bucket_bytes}, hooks_on_);
  }

  void control(int server, Control kind, double a = 0, double b = 0, double c = 0) {
    comm_.send(Tensor::from_vector<double>({static_cast<double>(kind), a, b, c}, {ps::kControlWords}),
               workers_ + server, ps::kControlTag);
  }
  int servers() const { return static_cast<int>(layout_.server_pieces.size()); }

  // Posts a receive for every piece's values (before asking, so that they land directly).
  void expect_values() {
    receives_.clear();
    for (std::size_t i = 0; i < layout_.pieces.size(); ++i) {
      receives_.push_back(
          comm_.irecv(values_[i], workers_ + layout_.pieces[i].server, ps::kPieceTag + static_cast<int>(i)));
    }
  }
  // Waits for them and copies them into the parameters; the oldest rollback generation
  // among them is what the next push says it was computed from (with several servers, one
  // may send values from before a rollback that another has already made).
  void take_values() {
    NoGradGuard no_grad;
    std::int64_t generation = std::numeric_limits<std::int64_t>::max();
    for (std::size_t i = 0; i < receives_.size(); ++i) {
      receives_[i]->wait();
      const std::int64_t length = layout_.pieces[i].length;
      generation = std::min(generation, static_cast<std::int64_t>(values_[i].narrow(0, length, 1).item()));
      for (const PsSegment& s : layout_.pieces[i].segments) {
        Tensor flat = params_[s.param].data().view({params_[s.param].numel()});
        flat.narrow(0, s.offset, s.length).copy_(values_[i].narrow(0, s.at, s.length));
      }
    }
    if (!receives_.empty() && generation != generation_) {
      previous_generation_ = generation_;
      changed_after_ = pushes_;
      generation_ = generation;
    }
    receives_.clear();
  }

  // The oldest rollback generation of the values that its latest `pushes` pushes were
  // computed from (push k computes from the values taken after push k - 1).
  std::int64_t generation_of_latest(std::int64_t pushes) const {
    return changed_after_ > pushes_ - pushes ? previous_generation_ : generation_;
  }

  void begin_push(double lr, bool deferred, std::int64_t batches) {
    DTRAIN_CHECK(!armed_, "ParameterServer: begin_push twice without finish_push");
    expect_values();
    push_->set_push(lr, false, batches, generation_);
    lr_ = lr;
    batches_ = batches;
    deferred_ = deferred;
    armed_ = true;
    hooks_on_ = !deferred;  // deferred: finish_push hands every bucket over
  }

  void finish_push(bool skip) {
    DTRAIN_CHECK(armed_, "ParameterServer: finish_push without begin_push");
    DTRAIN_CHECK(!skip || deferred_,
                 "ParameterServer: only a deferred push can be skipped (its buckets wait for the "
                 "check)");
    armed_ = false;
    hooks_on_ = false;
    push_->set_push(lr_, skip, batches_, generation_);
    reducer_->finish();  // the buckets backward did not send, then every send done
    ++pushes_;
    take_values();
  }

 private:
  Communicator& comm_;
  const int workers_;
  const PsLayout layout_;
  std::vector<Variable> params_;
  std::vector<Tensor> values_;  // per piece, then its server's rollback generation
  // The oldest rollback generation of the values it holds; the one before, and the pushes
  // made when it changed (those computed from the earlier values).
  std::int64_t generation_ = 0, previous_generation_ = 0, changed_after_ = -1;
  std::int64_t pushes_ = 0;
  std::vector<RecvWorkPtr> receives_;
  bool hooks_on_ = false;  // the reducer's hooks push while a push is armed and not deferred
  PsPushExchange* push_ = nullptr;
  std::unique_ptr<GradientReducer> reducer_;
  double lr_ = 0;
  std::int64_t batches_ = 0;
  bool deferred_ = false;
  bool armed_ = false;
};

ParameterServer::ParameterServer(CommunicatorPtr world, std::shared_ptr<nn::Module> model, PsOptions options)
    : model_(std::move(model)), options_(options) {
  DTRAIN_CHECK(world != nullptr && model_ != nullptr, "ParameterServer: the communicator and the model must be given");
  check_ps_options(options_);
  DTRAIN_CHECK(world->backend() == "mpi", "ParameterServer: needs an MPI communicator (launch with mpirun), got {}",
               world->backend());
  DTRAIN_CHECK(options_.servers >= 1 && options_.servers < world->size(),
               "ParameterServer: {} server(s) among {} ranks: need at least one server and one worker",
               options_.servers, world->size());
  DTRAIN_CHECK(options_.mode != PsMode::Ssp || options_.staleness >= 0,
               "ParameterServer: the staleness bound must be >= 0, got {}", options_.staleness);
  DTRAIN_CHECK(options_.bucket_bytes > 0, "ParameterServer: bucket_bytes must be positive");
  workers_ = world->size() - options_.servers;
  DTRAIN_CHECK(options_.backup_workers < workers_,
               "ParameterServer: {} backup worker(s) among {} workers: an update needs at least one gradient",
               options_.backup_workers, workers_);
  state_device("ParameterServer", *model_);  // one device
  check_same_structure("ParameterServer", *model_, *world, Device::cpu());
  // Every rank starts from worker 0's state (servers take their shards from it), through
  // host memory since the servers talk MPI.
  const auto from_worker0 = [&](Tensor target) {
    Tensor host = target.to(Device::cpu()).contiguous();
    world->broadcast(host, 0);
    target.copy_(host);
  };
  for (auto& p : model_->parameters()) from_worker0(p.data());
  for (auto& [name, b] : model_->named_buffers()) from_worker0(b);
  std::vector<std::int64_t> numels;
  std::optional<DType> dtype;
  for (auto& [name, p] : trainable_parameters(*model_)) {
    DTRAIN_CHECK(!dtype || *dtype == p.dtype(),
                 "ParameterServer: the trainable parameters must share one dtype ('{}' is {}, an earlier one {})", name,
                 dtype_name(p.dtype()), dtype_name(*dtype));
    dtype = p.dtype();
    params_.push_back(p);
    param_names_.push_back(name);
    numels.push_back(p.numel());
  }
  DTRAIN_CHECK(!params_.empty(), "ParameterServer: the model has no trainable parameters");
  comm_ = world->split(0, world->rank());
  const bool server = world->rank() >= workers_;
  worker_group_ = world->split(server ? 1 : 0, world->rank());
  if (server) worker_group_ = nullptr;
  for (int w = 0; w < workers_; ++w) live_workers_.push_back(w);
  layout_ = std::make_unique<PsLayout>(ps_layout(numels, dtype_size(*dtype), options_.servers, options_.bucket_bytes));
  if (!server) {
    worker_ = std::make_unique<Worker>(*comm_, workers_, *layout_, trainable_parameters(*model_), *dtype,
                                       options_.bucket_bytes);
  }
}

namespace {
std::string dropped_message(int worker) {
  return fmt::format(
      "parameter server 0 dropped this worker (worker {}) as lost: it pushed nothing for longer than the limit "
      "(PsOptions::lost_after; the trainers' is half of --timeout); the others trained on without it, and it leaves",
      worker);
}

// Server 0's notice arrived: the receive is done without error (a failed or shut-down
// communicator also completes it, with an error) and holds its 1.
bool notice_arrived(RecvWork& notice, const Tensor& buffer) {
  if (!notice.test()) return false;
  try {
    notice.wait();
  } catch (const std::exception&) {
    return false;
  }
  return buffer.item() == 1.0;
}
}  // namespace

ParameterServer::~ParameterServer() {
  if (!dropped_notice_) return;
  // Destroyed while the error that the drop caused unwinds to run_program: the check stays
  // true without the communicator, which goes with this object.
  if (notice_arrived(*dropped_notice_, dropped_notice_buffer_)) {
    set_departure_check([message = dropped_message(worker_index())] { return message; });
  } else {
    set_departure_check({});
  }
}

bool ParameterServer::is_server() const { return comm_->rank() >= workers_; }

int ParameterServer::worker_index() const { return is_server() ? -1 : comm_->rank(); }

void ParameterServer::check_worker(const char* op) const {
  DTRAIN_CHECK(worker_ != nullptr, "ParameterServer::{}: rank {} is a server (serve() is its call)", op, comm_->rank());
  DTRAIN_CHECK(!stopped_, "ParameterServer::{}: this worker has shut down", op);
}

void ParameterServer::serve(const optim::Optimizer& prototype, PsSaveShare save) {
  DTRAIN_CHECK(is_server(), "ParameterServer::serve: rank {} is a worker", comm_->rank());
  DTRAIN_CHECK(!stopped_, "ParameterServer::serve: this server has served its job already");
  const int server = comm_->rank() - workers_;
  const ServerState proto = prototype_state(prototype);
  std::vector<Tensor> values;
  std::vector<optim::NamedTensors> states;
  for (std::size_t i : layout_->server_pieces[static_cast<std::size_t>(server)]) {
    const PsPiece& piece = layout_->pieces[i];
    Tensor flat = Tensor::empty({piece.length}, {params_.front().dtype()});
    for (const PsSegment& s : piece.segments) {
      flat.narrow(0, s.at, s.length).copy_(params_[s.param].data().reshape({-1}).narrow(0, s.offset, s.length));
    }
    values.push_back(std::move(flat));
    states.push_back(piece_state(proto, piece));
  }
  // A piece's optimizer state as the checkpoint names it: by parameter and element range.
  // The piece's optimizer has one parameter per segment ("<buffer>.<segment>").
  const auto share = [this](std::size_t id, const optim::NamedTensors& state) {
    const PsPiece& piece = layout_->pieces[id];
    optim::NamedTensors out;
    for (const auto& [key, t] : state) {
      if (key == "lr" || key == "steps") {
        out.emplace_back(key, t);
      } else if (key == "updates") {
        for (std::size_t k = 0; k < piece.segments.size(); ++k) {
          out.emplace_back(param_names_[piece.segments[k].param] + "/updates",
                           t.narrow(0, static_cast<std::int64_t>(k), 1).reshape({}).clone());
        }
      } else {
        const auto dot = key.rfind('.');
        const PsSegment& s = piece.segments[std::stoull(key.substr(dot + 1))];
        out.emplace_back(
            fmt::format("{}[{}:{}]/{}", param_names_[s.param], s.offset, s.offset + s.length, key.substr(0, dot)),
            t.reshape({-1}).clone());
      }
    }
    return out;
  };
  std::vector<std::int64_t> dims;
  for (const Variable& p : params_) dims.push_back(p.data().dim());
  PsServer(*comm_, workers_, server, *layout_, dims, std::move(values), options_, prototype, std::move(states), share,
           std::move(save))
      .run();
  stopped_ = true;
}

void ParameterServer::watch_for_drop() {
  if (dropped_notice_ || options_.mode == PsMode::Sync || options_.lost_after.count() == 0) return;
  dropped_notice_buffer_ = Tensor::zeros({1}, {DType::f64});
  dropped_notice_ = comm_->irecv(dropped_notice_buffer_, workers_, ps::kDroppedTag);
  // When this worker wakes from a stall and finds its messages timed out, it leaves quietly
  // instead of ending the job that went on without it.
  set_departure_check(
      [notice = dropped_notice_, buffer = dropped_notice_buffer_, message = dropped_message(worker_index())] {
        return notice_arrived(*notice, buffer) ? message : std::string();
      });
}

void ParameterServer::check_not_dropped() const {
  DTRAIN_CHECK(!dropped_notice_ || !notice_arrived(*dropped_notice_, dropped_notice_buffer_), "{}",
               dropped_message(worker_index()));
}

void ParameterServer::take_leave_answer() {
  if (!leave_answer_) return;
  leave_answer_->wait();
  leave_answer_.reset();
  const std::vector<double> lost = leave_answer_buffer_.to_vector<double>();
  std::vector<int> live, ranks;
  for (int w = 0; w < workers_; ++w) {
    if (lost[static_cast<std::size_t>(w)] != 0) continue;
    live.push_back(w);
    const auto at = std::find(live_workers_.begin(), live_workers_.end(), w);
    DTRAIN_CHECK(at != live_workers_.end(), "parameter server: worker {} came back after it was lost", w);
    ranks.push_back(static_cast<int>(at - live_workers_.begin()));
  }
  if (live == live_workers_) return;
  for (int w : live_workers_) {
    if (std::find(live.begin(), live.end(), w) == live.end()) lost_workers_.push_back(w);
  }
  // Evaluation and the epoch's sums go over the workers left. Forgetting the lost ones also
  // lets this process end without MPI_Finalize, which would wait for a stopped one.
  for (int w : live_workers_) {
    if (std::find(live.begin(), live.end(), w) != live.end()) continue;
    peer_recovery(*comm_, "parameter servers: a lost worker").forget_peer(w);
    peer_recovery(*worker_group_, "parameter servers: a lost worker")
        .forget_peer(
            static_cast<int>(std::find(live_workers_.begin(), live_workers_.end(), w) - live_workers_.begin()));
  }
  worker_group_ = peer_recovery(*worker_group_, "parameter servers: the workers left").subgroup(ranks);
  live_workers_ = std::move(live);
}

void ParameterServer::join() {
  check_worker("join");
  watch_for_drop();
  check_not_dropped();
  take_leave_answer();
  worker_->expect_values();
  for (int s = 0; s < options_.servers; ++s) worker_->control(s, Control::Join);
  worker_->take_values();
}

std::optional<std::int64_t> ParameterServer::claim_batch(std::int64_t epoch, std::int64_t batches) {
  check_worker("claim_batch");
  DTRAIN_CHECK(options_.mode != PsMode::Sync || options_.backup_workers > 0,
               "ParameterServer::claim_batch: sync mode without backup workers reads fixed shards (every worker pushes "
               "every step)");
  check_not_dropped();
  Tensor reply = Tensor::empty({1}, {DType::f64});
  RecvWorkPtr r = comm_->irecv(reply, workers_, ps::kClaimTag);
  worker_->control(0, Control::Claim, static_cast<double>(epoch), static_cast<double>(batches));
  r->wait();
  const auto batch = static_cast<std::int64_t>(reply.item());
  if (batch < 0) return std::nullopt;
  return batch;
}

void ParameterServer::begin_push(double lr, bool deferred, std::int64_t batches) {
  check_worker("begin_push");
  check_not_dropped();
  trace::Span span("parameter server: previous push", trace::Phase::Communication);
  worker_->begin_push(lr, deferred, batches);
}

void ParameterServer::finish_push(bool skip) {
  check_worker("finish_push");
  trace::Span span("parameter server: push and pull", trace::Phase::Communication);
  worker_->finish_push(skip);
}

void ParameterServer::leave() {
  check_worker("leave");
  take_leave_answer();  // of a leave() that sync_parameters() did not follow
  leave_answer_buffer_ = Tensor::empty({workers_}, {DType::f64});
  leave_answer_ = comm_->irecv(leave_answer_buffer_, workers_, ps::kLeaveTag);
  for (int s = 0; s < options_.servers; ++s) worker_->control(s, Control::Leave);
}

void ParameterServer::sync_parameters() {
  check_worker("sync_parameters");
  DTRAIN_CHECK(leave_answer_ != nullptr, "ParameterServer::sync_parameters: leave() first");
  // Server 0 answers the leave once every live worker has left, after its last push was
  // applied (finish_push waited for its values), so the servers now hold every push.
  take_leave_answer();
  worker_->expect_values();
  for (int s = 0; s < options_.servers; ++s) worker_->control(s, Control::Fetch);
  worker_->take_values();
}

StalenessStats ParameterServer::staleness() {
  check_worker("staleness");
  Tensor reply = Tensor::empty({ps::kStatsWords}, {DType::f64});
  RecvWorkPtr r = comm_->irecv(reply, workers_, ps::kStatsTag);
  worker_->control(0, Control::Stats);
  r->wait();
  const std::vector<double> v = reply.to_vector<double>();
  StalenessStats stats;
  for (std::int64_t k = 0; k < ps::kStalenessBins; ++k) stats.counts.push_back(static_cast<std::int64_t>(v[k]));
  stats.max = static_cast<std::int64_t>(v[ps::kStalenessBins]);
  stats.dropped = static_cast<std::int64_t>(v[ps::kStalenessBins + 1]);
  stats.handed_again = static_cast<std::int64_t>(v[ps::kStalenessBins + 2]);
  stats.missed = static_cast<std::int64_t>(v[ps::kStalenessBins + 3]);
  return stats;
}

ParameterServer::ServerState ParameterServer::prototype_state(const optim::Optimizer& prototype) const {
  ServerState out;
  if (prototype.steps() == 0) return out;              // fresh: nothing to carry over
  std::unordered_map<const void*, std::size_t> index;  // prototype parameter -> position
  for (std::size_t i = 0; i < prototype.params().size(); ++i) index.emplace(prototype.params()[i].id(), i);
  std::vector<std::size_t> position;
  for (const Variable& p : params_) {
    const auto it = index.find(p.id());
    DTRAIN_CHECK(it != index.end(), "parameter server: the optimizer is not over this model's parameters");
    position.push_back(it->second);
  }
  for (const auto& [key, t] : prototype.state()) {
    if (key == "lr" || key == "steps") {
      out.scalars.emplace_back(key, t);
    } else if (key == "updates") {
      const std::vector<std::int64_t> all = t.to_vector<std::int64_t>();
      for (std::size_t p : position) out.updates.push_back(all[p]);
    } else {
      const auto dot = key.rfind('.');
      const std::size_t at = std::stoull(key.substr(dot + 1));
      auto& slots = out.buffers[key.substr(0, dot)];
      slots.resize(params_.size());
      for (std::size_t p = 0; p < position.size(); ++p) {
        if (position[p] == at) slots[p] = t;
      }
    }
  }
  return out;
}

optim::NamedTensors ParameterServer::piece_state(const ServerState& proto, const PsPiece& piece) const {
  if (proto.scalars.empty()) return {};
  // As the server's optimizer sees the piece: one parameter per segment, [n] or [1, n].
  optim::NamedTensors state = proto.scalars;
  std::vector<std::int64_t> updates;
  for (const PsSegment& s : piece.segments) updates.push_back(proto.updates[s.param]);
  state.emplace_back("updates",
                     Tensor::from_vector<std::int64_t>(updates, {static_cast<std::int64_t>(updates.size())}));
  for (const auto& [name, slots] : proto.buffers) {
    for (std::size_t k = 0; k < piece.segments.size(); ++k) {
      const PsSegment& s = piece.segments[k];
      if (!slots[s.param].defined()) continue;  // never updated: the server's optimizer starts it
      const Tensor part = slots[s.param].reshape({-1}).narrow(0, s.offset, s.length);
      state.emplace_back(
          fmt::format("{}.{}", name, k),
          part.reshape(slice_shape(s.length, static_cast<std::size_t>(params_[s.param].data().dim()))).clone());
    }
  }
  return state;
}

std::vector<std::vector<double>> ParameterServer::ask_servers(Control kind, double a, int tag, std::int64_t words,
                                                              int first, int last, double b, double c) {
  if (last < 0) last = options_.servers - 1;
  std::vector<RecvWorkPtr> answers;
  std::vector<Tensor> replies;
  for (int s = first; s <= last; ++s) {
    replies.push_back(Tensor::empty({words}, {DType::f64}));
    answers.push_back(comm_->irecv(replies.back(), workers_ + s, tag));
  }
  for (int s = first; s <= last; ++s) worker_->control(s, kind, a, b, c);
  std::vector<std::vector<double>> out;
  for (std::size_t s = 0; s < answers.size(); ++s) {
    answers[s]->wait();
    out.push_back(replies[s].to_vector<double>());
  }
  return out;
}

void ParameterServer::request_save(std::int64_t step) {
  check_worker("request_save");
  DTRAIN_CHECK(worker_index() == 0, "ParameterServer::request_save: only worker 0 asks for checkpoints");
  ask_servers(Control::Save, static_cast<double>(step), ps::kSaveTag, 1);
}

void ParameterServer::keep_copy(std::int64_t id) {
  check_worker("keep_copy");
  ask_servers(Control::Copy, static_cast<double>(id), ps::kCopyTag, 1);
}

std::optional<RemoteState::Restored> ParameterServer::restore_copy(std::int64_t id, std::int64_t window) {
  check_worker("restore_copy");
  DTRAIN_CHECK(window >= 1, "ParameterServer::restore_copy: the window must be at least one push, got {}", window);
  // Server 0 settles it: which copy, or that another worker's request came first (since the
  // oldest values the window's pushes were computed from: the trouble may be theirs). Then the
  // others return to that copy by its id, as server 0's rollback number; also when another
  // worker's request came first, which may not have reached them yet: this worker's values
  // must not come from before it (in lockstep that worker's next push would wait forever for
  // this one's, which the servers would drop).
  const std::vector<double> settled = ask_servers(Control::Restore, static_cast<double>(id), ps::kRestoreTag, 4, 0, 0,
                                                  0, static_cast<double>(worker_->generation_of_latest(window)))
                                          .front();
  std::optional<RemoteState::Restored> restored;
  if (settled[0] != 0) {
    restored = RemoteState::Restored{.copy = static_cast<std::int64_t>(settled[1]),
                                     .undone = static_cast<std::int64_t>(settled[2])};
  }
  if (options_.servers > 1) ask_servers(Control::Restore, settled[1], ps::kRestoreTag, 4, 1, -1, settled[3]);
  // Each server answered after it restored (or found it done): its values now are those.
  worker_->expect_values();
  for (int s = 0; s < options_.servers; ++s) worker_->control(s, Control::Fetch);
  worker_->take_values();
  return restored;
}

void ParameterServer::shutdown() {
  check_worker("shutdown");  // every push's sends were done in its finish_push
  for (int s = 0; s < options_.servers; ++s) worker_->control(s, Control::Stop);
  stopped_ = true;
}

}  // namespace dtrain::dist
