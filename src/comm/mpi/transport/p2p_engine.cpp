#include "comm/mpi/transport/p2p_engine.h"

#include "comm/backoff.h"
#include "comm/mpi/transport/mpi_runtime.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <exception>

#include <pthread.h>
#include <sys/prctl.h>

namespace dtrain::dist::mpi {

class P2pEngine::Op final : public RecvWork {
 public:
  Op(P2pEngine& engine, const Message& m, std::chrono::steady_clock::time_point now)
      : engine(engine),
        name(m.op),
        kind(m.kind),
        tensor(m.tensor),
        peer(m.peer),
        wanted_tag(m.tag),
        count(static_cast<int>(m.tensor.numel())),
        type(datatype(m.tensor.dtype())),
        bytes(m.tensor.nbytes()),
        since(m.kind == P2POp::Kind::Send ? now : kNotStarted),
        source_(m.peer),
        tag_(m.tag) {}

  void wait() override {
    // A finished message never touches its engine again (as CommThread's tasks).
    if (!done.load(std::memory_order_acquire)) engine.wait_for(*this);
    if (error) std::rethrow_exception(error);
  }
  bool test() override { return done.load(std::memory_order_acquire) || engine.test(*this); }
  int source() const override { return source_; }
  int tag() const override { return tag_; }

  P2pEngine& engine;
  const char* const name;
  const P2POp::Kind kind;
  Tensor tensor;  // released when done, unless MPI may still use it
  const int peer;
  const int wanted_tag;
  const int count;
  const MPI_Datatype type;
  const std::size_t bytes;
  static constexpr auto kNotStarted = std::chrono::steady_clock::time_point::max();
  // The rest is written under the engine's mutex, and read by wait()'s caller once done.
  // When the timeout counts from: a send's call; a receive's first wait() or match.
  std::chrono::steady_clock::time_point since;
  MPI_Request request = MPI_REQUEST_NULL;
  bool matched = false;  // a receive whose message MPI_Imrecv is receiving
  // A message of the wrong size: received into `discard`, then the receive fails with
  // `mismatch` (the tensor stays as it was).
  std::vector<std::byte> discard;
  std::exception_ptr mismatch;
  int source_;
  int tag_;
  std::exception_ptr error;
  std::atomic<bool> done{false};
};

namespace {
bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

int mpi_source(int peer) { return peer == kAnySource ? MPI_ANY_SOURCE : peer; }
int mpi_tag(int tag) { return tag == kAnyTag ? MPI_ANY_TAG : tag; }

// Whether a message from `source` with `tag` fits receive pattern (peer, wanted).
bool fits(int peer, int wanted, int source, int tag) {
  return (peer == kAnySource || peer == source) && (wanted == kAnyTag || wanted == tag);
}

std::exception_ptr mpi_error(const char* op, int rc, const char* call) {
  try {
    check(rc, call);
  } catch (const Error& e) {
    return std::make_exception_ptr(Error(fmt::format("{}: {}", op, e.message())));
  }
  return nullptr;
}

constexpr std::chrono::microseconds kIdlePoll{1000};

std::string describe_tag(int tag) { return tag == kAnyTag ? std::string("any tag") : fmt::format("tag {}", tag); }
}  // namespace

P2pEngine::P2pEngine(MPI_Comm comm, std::chrono::milliseconds timeout, PeerName peer_name, TimeoutHandler on_timeout)
    : comm_(comm), timeout_(timeout), peer_name_(std::move(peer_name)), on_timeout_(std::move(on_timeout)) {
  thread_ = std::thread([this] { run_progress_thread(); });
}

P2pEngine::~P2pEngine() {
  close();
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
  // Messages that failed while in flight (a send nobody received): MPI may still read or
  // write their tensors, which therefore must never be freed. Kept on purpose until exit.
  if (!mpi_finalized()) {
    std::erase_if(abandoned_, [](const std::shared_ptr<Op>& op) {
      int flag = 0;
      return MPI_Test(&op->request, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag;
    });
  }
  if (!abandoned_.empty()) {
    spdlog::warn("dist: {} failed message(s) still held by MPI; their tensors are kept until exit", abandoned_.size());
    new std::vector<std::shared_ptr<Op>>(std::move(abandoned_));  // NOLINT: leaked on purpose, see above
  }
}

std::vector<RecvWorkPtr> P2pEngine::post(const std::vector<Message>& messages) {
  std::vector<RecvWorkPtr> works;
  if (messages.empty()) return works;
  works.reserve(messages.size());
  {
    std::lock_guard lock(mutex_);
    const char* op = messages.front().op;
    DTRAIN_CHECK(failure_.empty(), "{}: the communicator is unusable: {}", op, failure_);
    DTRAIN_CHECK(!closed_, "{}: the communicator is shut down", op);
    const auto now = std::chrono::steady_clock::now();
    const std::size_t first = pending_.size();
    for (const Message& m : messages) {
      auto message = std::make_shared<Op>(*this, m, now);
      if (m.kind == P2POp::Kind::Send) {
        const int rc =
            MPI_Isend(m.tensor.raw_data(), message->count, message->type, m.peer, m.tag, comm_, &message->request);
        if (auto error = mpi_error(op, rc, "MPI_Isend")) {
          withdraw_locked(first, error);
          std::rethrow_exception(error);
        }
      }
      pending_.push_back(message);
      works.push_back(std::move(message));
    }
  }
  wake_.notify_one();
  return works;
}

// The caller gets no Work for a batch that throws, so its messages posted so far are
// failed with the same error: the receives (nothing matched them yet: matching needs
// mutex_) are withdrawn, the sends already issued are abandoned to MPI, which may still
// deliver them, with their tensors kept alive.
void P2pEngine::withdraw_locked(std::size_t first, const std::exception_ptr& error) {
  for (std::size_t i = first; i < pending_.size(); ++i) {
    Op& op = *pending_[i];
    if (op.request != MPI_REQUEST_NULL) abandoned_.push_back(pending_[i]);
    else op.tensor = Tensor();
    op.error = error;
    op.done.store(true, std::memory_order_release);
  }
  pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(first), pending_.end());
}

void P2pEngine::fail(const std::string& report) {
  std::lock_guard lock(mutex_);
  fail_locked(report, nullptr);
}

void P2pEngine::close() {
  std::unique_lock lock(mutex_);
  if (closed_) return;
  closed_ = true;
  const bool finalized = mpi_finalized();
  for (auto& op : pending_) {
    if (finalized) {
      finish_locked(*op, std::make_exception_ptr(Error(fmt::format("{}: MPI was finalized first", op->name))));
    } else if (op->kind == P2POp::Kind::Recv && !op->matched) {
      finish_locked(*op, std::make_exception_ptr(
                             Error(fmt::format("{}: the communicator was shut down before a message from {} arrived",
                                               op->name, describe_peer(op->peer)))));
    }
  }
  std::erase_if(pending_, [](const std::shared_ptr<Op>& op) { return op->done.load(std::memory_order_relaxed); });
  wait_until(lock, Backoff(spin_for(0)), [&] { return pending_.empty(); });
}

// ---- the progress loop ---------------------------------------------------------

P2pEngine::Pass P2pEngine::progress_locked() {
  Pass pass;
  // Open MPI's MPI_Improbe looks for a message before it progresses the transports, so a
  // message that its own progress brought in shows only at the next call: one probe per
  // poll finds a message one backoff sleep late. Probing again when the first finds nothing
  // takes it in the poll that brought it (here, 2 ranks, a message sent while the receiver
  // slept: about 450 us from send to wait's return before, 210 us after; MPI_Test finishes
  // a request in the call that progresses it and needs no second call).
  pass.progressed = match_receives_locked() || match_receives_locked();
  for (auto& op : pending_) {
    if (op->done.load(std::memory_order_relaxed) || op->request == MPI_REQUEST_NULL) continue;
    int flag = 0;
    const int rc = MPI_Test(&op->request, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      op->request = MPI_REQUEST_NULL;
      finish_locked(*op, mpi_error(op->name, rc, "MPI_Test"));
    } else if (flag) {
      finish_locked(*op, op->mismatch);
    }
  }
  const std::size_t waiting = pending_.size();
  std::erase_if(pending_, [](const std::shared_ptr<Op>& op) { return op->done.load(std::memory_order_relaxed); });
  pass.progressed = pass.progressed || pending_.size() != waiting;

  // Every message has the same timeout, so the one whose clock started first is the first
  // to run out; a receive nobody waits for and no message matched has no clock yet (it
  // cannot stall anybody). Reported once: the thread that finds it handles it.
  if (!pending_.empty() && !timing_out_) {
    const std::shared_ptr<Op>& oldest = *std::min_element(
        pending_.begin(), pending_.end(), [](const auto& a, const auto& b) { return a->since < b->since; });
    const auto now = std::chrono::steady_clock::now();
    const std::chrono::duration<double> waited =
        oldest->since == Op::kNotStarted ? std::chrono::duration<double>(0) : now - oldest->since;
    if (waited >= timeout_) {
      pass.timeout = fmt::format("{} ({} bytes, {}) waited {:.1f} s for {}", oldest->name, oldest->bytes,
                                 describe_tag(oldest->wanted_tag), waited.count(), describe_peer(oldest->peer));
      pass.timed_out = oldest;
      timing_out_ = true;
    }
  }
  return pass;
}

// The owner fails its other parts (or ends the job) before any waiter here learns of the
// failure, so that a waiter finds the whole communicator failed.
void P2pEngine::handle_timeout(std::unique_lock<std::mutex>& lock, const Pass& pass) {
  lock.unlock();
  on_timeout_(pass.timeout);
  lock.lock();
  fail_locked(pass.timeout, pass.timed_out.get());
}

// Probes for the receives not matched yet, in issue order. A receive R after one that
// found nothing in this pass (E) may take a message only if E could not: MPI gives a
// message to the earliest receive it fits, and it may have arrived since E's probe. So
// R peeks (MPI_Iprobe) and yields when E fits what it sees. Only this engine receives on
// comm_, under mutex_, so the message that was seen is the one then received.
bool P2pEngine::match_receives_locked() {
  bool matched = false;
  std::vector<const Op*> empty;  // earlier receives that found no message in this pass
  for (auto& pointer : pending_) {
    Op& op = *pointer;
    if (op.kind != P2POp::Kind::Recv || op.matched || op.done.load(std::memory_order_relaxed)) continue;
    int source = mpi_source(op.peer), tag = mpi_tag(op.wanted_tag);
    int found = 0;
    MPI_Status status;
    if (!empty.empty()) {
      const int rc = MPI_Iprobe(source, tag, comm_, &found, &status);
      if (rc != MPI_SUCCESS) {
        finish_locked(op, mpi_error(op.name, rc, "MPI_Iprobe"));
        continue;
      }
      const bool yields = found && std::any_of(empty.begin(), empty.end(), [&](const Op* e) {
                            return fits(e->peer, e->wanted_tag, status.MPI_SOURCE, status.MPI_TAG);
                          });
      if (!found || yields) {
        empty.push_back(&op);
        continue;
      }
      source = status.MPI_SOURCE;  // exactly the message seen: the earliest from there with that tag
      tag = status.MPI_TAG;
    }
    MPI_Message message;
    const int rc = MPI_Improbe(source, tag, comm_, &found, &message, &status);
    if (rc != MPI_SUCCESS) {
      finish_locked(op, mpi_error(op.name, rc, "MPI_Improbe"));
    } else if (!found) {
      empty.push_back(&op);
    } else {
      accept_locked(op, message, status);
      matched = true;
    }
  }
  return matched;
}

// The probed message is this receive's: receive it if its size fits, else receive it into
// a discard buffer (as any message, under the timeout: the sender may die mid-transfer) and
// then fail naming both sizes (the tensor stays as it was).
void P2pEngine::accept_locked(Op& op, MPI_Message message, const MPI_Status& status) {
  op.source_ = status.MPI_SOURCE;
  op.tag_ = status.MPI_TAG;
  if (op.since == Op::kNotStarted) op.since = std::chrono::steady_clock::now();
  // In bytes, as MPI_Count: MPI_Get_count's int is MPI_UNDEFINED beyond 2 GiB.
  MPI_Count incoming = 0;
  if (const int rc = MPI_Get_elements_x(&status, MPI_BYTE, &incoming); rc != MPI_SUCCESS) {
    finish_locked(op, mpi_error(op.name, rc, "MPI_Get_elements_x"));  // the message stays unreceived
    return;
  }
  const bool fits = incoming == static_cast<MPI_Count>(op.bytes);
  if (!fits) {
    op.mismatch = std::make_exception_ptr(Error(
        fmt::format("{}: expected {} bytes ({} x {}) from {} with tag {}, got {} bytes", op.name, op.bytes, op.count,
                    dtype_name(op.tensor.dtype()), peer_name_(op.source_), op.tag_, static_cast<long long>(incoming))));
    op.tensor = Tensor();  // left as it was: the message goes to discard
    op.discard.resize(static_cast<std::size_t>(incoming));
  }
  // A discard of any size as whole chunks of a contiguous type (a count is an int).
  constexpr int kChunk = 1 << 20;
  MPI_Datatype chunk = MPI_DATATYPE_NULL;
  if (!fits && incoming > INT_MAX) {
    MPI_Type_contiguous(kChunk, MPI_BYTE, &chunk);
    MPI_Type_commit(&chunk);
    op.discard.resize(static_cast<std::size_t>((incoming + kChunk - 1) / kChunk) * kChunk);
  }
  const int rc =
      fits ? MPI_Imrecv(op.tensor.raw_data(), op.count, op.type, &message, &op.request)
      : chunk != MPI_DATATYPE_NULL
          ? MPI_Imrecv(op.discard.data(), static_cast<int>(op.discard.size() / kChunk), chunk, &message, &op.request)
          : MPI_Imrecv(op.discard.data(), static_cast<int>(incoming), MPI_BYTE, &message, &op.request);
  if (chunk != MPI_DATATYPE_NULL) MPI_Type_free(&chunk);  // MPI keeps it until the receive ends
  if (auto error = mpi_error(op.name, rc, "MPI_Imrecv")) {
    op.request = MPI_REQUEST_NULL;
    finish_locked(op, error);
    return;
  }
  op.matched = true;
}

void P2pEngine::finish_locked(Op& op, std::exception_ptr error) {
  op.error = std::move(error);
  op.tensor = Tensor();  // MPI is done with it
  op.discard = {};
  op.done.store(true, std::memory_order_release);
}

void P2pEngine::fail_locked(const std::string& report, const Op* timed_out) {
  if (!failure_.empty()) return;
  failure_ = report;
  for (auto& op : pending_) {
    op->error = std::make_exception_ptr(
        Error(op.get() == timed_out ? report + "; the communicator is now unusable"
                                    : fmt::format("{}: the communicator is unusable: {}", op->name, report)));
    if (op->request != MPI_REQUEST_NULL) abandoned_.push_back(op);
    else op->tensor = Tensor();
    op->done.store(true, std::memory_order_release);
  }
  pending_.clear();
}

template <class Done>
void P2pEngine::wait_until(std::unique_lock<std::mutex>& lock, Backoff backoff, Done&& done) {
  // While a thread waits here, it drives the loop and the progress thread sleeps.
  ++waiters_;
  struct Leave {
    P2pEngine& engine;
    ~Leave() {
      if (--engine.waiters_ == 0 && !engine.pending_.empty()) engine.wake_.notify_one();
    }
  } leave{*this};
  while (!done()) poll_once(lock, backoff);
}

void P2pEngine::poll_once(std::unique_lock<std::mutex>& lock, Backoff& backoff) {
  Pass pass = progress_locked();
  if (!pass.timeout.empty()) {
    handle_timeout(lock, pass);
    return;
  }
  lock.unlock();
  if (!pass.progressed) backoff.pause();  // nothing moved: give the core away
  lock.lock();
}

void P2pEngine::wait_for(Op& op) {
  std::unique_lock lock(mutex_);
  if (op.since == Op::kNotStarted) op.since = std::chrono::steady_clock::now();
  wait_until(lock, Backoff(spin_for(op.bytes)), [&] { return op.done.load(std::memory_order_relaxed); });
}

bool P2pEngine::test(Op& op) {
  std::unique_lock lock(mutex_);
  if (op.done.load(std::memory_order_relaxed)) return true;
  Pass pass = progress_locked();
  if (!pass.timeout.empty()) handle_timeout(lock, pass);
  return op.done.load(std::memory_order_relaxed);
}

std::size_t P2pEngine::wait_any(const std::vector<WorkPtr>& works, std::chrono::milliseconds limit) {
  DTRAIN_CHECK(!works.empty(), "wait_any: no messages given");
  std::vector<Op*> ops;
  ops.reserve(works.size());
  for (const WorkPtr& w : works) {
    auto* op = dynamic_cast<Op*>(w.get());
    DTRAIN_CHECK(op != nullptr && &op->engine == this, "wait_any: a message of another communicator");
    ops.push_back(op);
  }
  const auto first_done = [&] {
    return std::find_if(ops.begin(), ops.end(), [](const Op* op) { return op->done.load(std::memory_order_acquire); });
  };
  if (auto it = first_done(); it != ops.end()) return static_cast<std::size_t>(it - ops.begin());
  std::unique_lock lock(mutex_);
  // A server idles here between steps: after the usual short spin it sleeps up to the idle
  // poll, as the progress thread does.
  const auto deadline = limit == std::chrono::milliseconds::max() ? std::chrono::steady_clock::time_point::max()
                                                                  : std::chrono::steady_clock::now() + limit;
  wait_until(lock, Backoff(Backoff::kSpin, kIdlePoll),
             [&] { return first_done() != ops.end() || std::chrono::steady_clock::now() >= deadline; });
  return static_cast<std::size_t>(first_done() - ops.begin());
}

void P2pEngine::forget(int peer) {
  std::lock_guard lock(mutex_);
  for (auto& op : pending_) {
    if (op->peer != peer || op->done.load(std::memory_order_relaxed)) continue;
    op->error = std::make_exception_ptr(
        Error(fmt::format("{}: {} was lost; the message was abandoned", op->name, describe_peer(peer))));
    if (op->request != MPI_REQUEST_NULL) abandoned_.push_back(op);  // MPI may still touch the tensor
    else op->tensor = Tensor();
    op->done.store(true, std::memory_order_release);
  }
  std::erase_if(pending_, [](const std::shared_ptr<Op>& op) { return op->done.load(std::memory_order_relaxed); });
}

void P2pEngine::run_progress_thread() {
  pthread_setname_np(pthread_self(), "dtrain-p2p");
  prctl(PR_SET_TIMERSLACK, 5'000UL, 0UL, 0UL, 0UL);  // as the CommThread's worker
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || (!pending_.empty() && waiters_ == 0); });
    if (stopping_) return;
    // Nobody waits on these messages yet: polling every millisecond costs about 2% of a
    // core while a receive is pending (measured; every 200 us, as a waiter does: 10%).
    Backoff backoff(Backoff::kSpin, kIdlePoll);
    try {
      while (!stopping_ && !pending_.empty() && waiters_ == 0) poll_once(lock, backoff);
    } catch (const std::exception& e) {
      // Out of memory, or the owner's timeout handler: an exception here would end the
      // process (std::terminate); the messages fail with it instead.
      if (!lock.owns_lock()) lock.lock();
      spdlog::error("dist: the point-to-point progress thread failed: {}", e.what());
      fail_locked(fmt::format("the point-to-point progress thread failed: {}", e.what()), nullptr);
    }
  }
}

std::string P2pEngine::describe_peer(int peer) const {
  return peer == kAnySource ? std::string("any rank") : peer_name_(peer);
}

}  // namespace dtrain::dist::mpi
