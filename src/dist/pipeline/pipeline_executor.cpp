#include "dist/pipeline/pipeline_executor.h"

#include "dtrain/core/trace.h"

#include "dtrain/autograd/autocast.h"
#include "dtrain/core/error.h"

#include <chrono>

namespace dtrain::dist {
namespace {

using Clock = std::chrono::steady_clock;
using Msg = PipelineMessage;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

constexpr int kMaxDims = 8;                // a header: dtype, rank, then up to kMaxDims sizes
constexpr std::int64_t kNarrowOutput = 8;  // see the constructor

Tensor encode_header(const Tensor& t) {
  DTRAIN_CHECK(t.dim() <= kMaxDims, "pipeline: an activation of {} dimensions crosses a stage boundary; at most {}",
               t.dim(), kMaxDims);
  std::vector<std::int64_t> h(2 + kMaxDims, 0);
  h[0] = static_cast<std::int64_t>(t.dtype());
  h[1] = t.dim();
  for (std::int64_t d = 0; d < t.dim(); ++d) h[static_cast<std::size_t>(2 + d)] = t.size(d);
  return Tensor::from_vector<std::int64_t>(h, {2 + kMaxDims});
}

std::pair<Shape, DType> decode_header(const Tensor& header) {
  const std::vector<std::int64_t> h = header.to_vector<std::int64_t>();
  return {Shape(h.begin() + 2, h.begin() + 2 + h[1]), static_cast<DType>(h[0])};
}

}  // namespace

PipelineExecutor::PipelineExecutor(Config config, std::vector<nn::ModulePtr> chunks)
    : config_(std::move(config)),
      chunks_(std::move(chunks)),
      stages_(config_.comm->size()),
      rank_(config_.comm->rank()) {
  DTRAIN_CHECK(static_cast<int>(chunks_.size()) == config_.virtual_stages,
               "pipeline: {} chunks given for {} virtual stages", chunks_.size(), config_.virtual_stages);
  // What W computes: the weights of the GEMMs and convolutions, whose gradients are the
  // costly part of a backward. B gives the 1-D parameters (biases, normalization scales and
  // shifts) theirs as it goes: cheap, and keeping their ops for W would keep more memory
  // (a Linear+ReLU's fused bias op would hold its input and output gradient until then).
  // So does a weight with a narrow output (fewer than 1/8 as many rows as columns: a
  // classifier head): its weight gradient costs little, while deferring it would keep its
  // wide input until W (on the 784-wide MLP's last stage, 1/8 of its peak under ZB-H1).
  for (const nn::ModulePtr& chunk : chunks_) {
    std::vector<Variable> weights;
    for (const Variable& p : chunk->parameters()) {
      if (p.dim() >= 2 && p.size(0) * kNarrowOutput >= p.size(1)) weights.push_back(p);
    }
    weights_.push_back(std::move(weights));
  }
}

int PipelineExecutor::virtual_stage(int chunk) const {
  return virtual_stage_of(config_.schedule, {stages_, config_.virtual_stages, 1}, rank_, chunk);
}

int PipelineExecutor::chunk_of(int virtual_stage) const {
  for (int v = 0; v < config_.virtual_stages; ++v) {
    if (this->virtual_stage(v) == virtual_stage) return v;
  }
  DTRAIN_FAIL("pipeline: rank {} holds no virtual stage {}", rank_, virtual_stage);
}

bool PipelineExecutor::here(int virtual_stage) const {
  return stage_of(config_.schedule, {stages_, config_.virtual_stages, 1}, virtual_stage) == rank_;
}

Tensor& PipelineExecutor::deliver(Msg::Kind kind, int boundary, int micro, int to) {
  const std::tuple key{static_cast<int>(kind), boundary, micro};
  return here(to) ? inbox_[key] : outbox_[key];
}

int PipelineExecutor::tag(const Msg& m) const { return 2 * m.boundary + (m.kind == Msg::Kind::Gradient ? 1 : 0); }
int PipelineExecutor::header_tag(int boundary) const { return 2 * stages_ * config_.virtual_stages + boundary; }

PipelineExecutor::Timing PipelineExecutor::run(const std::vector<Tensor>& inputs, bool train,
                                               std::optional<DType> autocast, const LastStageFn& last,
                                               const BeforeGradientsFn& before_gradients) {
  using Kind = PipelineAction::Kind;
  const PipelineShape shape{stages_, config_.virtual_stages, static_cast<int>(inputs.size())};
  const PipelinePlan plan = schedule_plan(config_.schedule, shape, rank_, /*forward_only=*/!train);
  // A run that failed part way (an exception) leaves nothing behind for this one.
  live_.clear();
  deferred_.clear();
  weights_ahead_.clear();
  // The passes that add to the parameters' gradients (backwards, and W passes where the
  // schedule splits them), how many of each kind each chunk has, to tell the data-parallel
  // hook which one is the last.
  gradient_passes_left_.clear();
  std::set<Key> whole_backwards;  // B passes that run their W too (see the header)
  const PipelineAction* previous = nullptr;
  for (const PipelineStep& step : plan.steps) {
    for (const PipelineAction& a : step.actions) {
      if (a.kind != Kind::Forward) ++gradient_passes_left_[{a.chunk, a.kind}];
      if (a.kind == Kind::Weight) weights_ahead_.push_back({a.chunk, a.micro});
      if (a.kind == Kind::Weight && previous != nullptr && previous->kind == Kind::Backward &&
          previous->chunk == a.chunk && previous->micro == a.micro && virtual_stage(a.chunk) == 0) {
        whole_backwards.insert({a.chunk, a.micro});
      }
      previous = &a;
    }
  }
  const bool fill_waits = !weights_ahead_.empty() && config_.tensor_comm->backend() != "nccl";
  inbox_.clear();
  receiving_.clear();
  outbox_.clear();
  sends_.clear();
  inputs_ = &inputs;
  autocast_ = autocast;
  timing_ = {};
  timing_.chunk_s.assign(chunks_.size(), PassTimes{0, 0, 0});
  for (const PipelineStep& step : plan.steps) {
    exchange(step.messages);
    for (const PipelineAction& a : step.actions) {
      // Every W that ran early or with its B left weights_ahead_; the others come in its order.
      if (a.kind == Kind::Weight && (weights_ahead_.empty() || weights_ahead_.front() != Key(a.chunk, a.micro))) {
        continue;
      }
      if (fill_waits) fill_wait(a, train, last, before_gradients);
      run_pass(a, train, last, before_gradients,
               a.kind == Kind::Backward && whole_backwards.contains({a.chunk, a.micro}));
    }
  }
  exchange(plan.tail);
  const auto start = Clock::now();
  trace::Span span("send wait", trace::Phase::Communication);
  for (auto& [work, tensor] : sends_) work->wait();
  timing_.wait_s += seconds_since(start);
  sends_.clear();
  inputs_ = nullptr;
  return timing_;
}

void PipelineExecutor::run_pass(const PipelineAction& a, bool train, const LastStageFn& last,
                                const BeforeGradientsFn& before_gradients, bool with_weight) {
  using Kind = PipelineAction::Kind;
  const auto start = Clock::now();
  const double waited = timing_.wait_s;  // a pass's receive (take_input) counts as waiting
  auto take_weight_turn = [&] {
    DTRAIN_CHECK(!weights_ahead_.empty() && weights_ahead_.front() == Key(a.chunk, a.micro),
                 "pipeline: W of chunk {} micro-batch {} out of the plan's order", a.chunk, a.micro);
    weights_ahead_.pop_front();
  };
  if (a.kind != Kind::Forward && before_gradients) {
    before_gradients(a.chunk, a.kind, --gradient_passes_left_[{a.chunk, a.kind}] == 0);
    if (with_weight) before_gradients(a.chunk, Kind::Weight, --gradient_passes_left_[{a.chunk, Kind::Weight}] == 0);
  }
  if (a.kind == Kind::Forward) {
    forward(a, train, last);
  } else if (a.kind == Kind::Backward) {
    if (with_weight) take_weight_turn();
    backward(a, last, with_weight);
  } else {
    take_weight_turn();
    weight(a);
  }
  if (config_.after_pass) config_.after_pass();
  const double took = seconds_since(start) - (timing_.wait_s - waited);
  PassTimes& chunk = timing_.chunk_s[static_cast<std::size_t>(a.chunk)];
  (a.kind == Kind::Forward ? chunk.forward : a.kind == Kind::Backward ? chunk.backward : chunk.weight) += took;
}

WorkPtr PipelineExecutor::awaited_receive(const PipelineAction& a) const {
  using Kind = PipelineAction::Kind;
  const int c = virtual_stage(a.chunk);
  std::tuple<int, int, int> key;
  if (a.kind == Kind::Forward && c > 0) key = {static_cast<int>(Msg::Kind::Activation), c - 1, a.micro};
  else if (a.kind == Kind::Backward && !is_last(a.chunk)) key = {static_cast<int>(Msg::Kind::Gradient), c, a.micro};
  else return nullptr;
  auto it = receiving_.find(key);
  return it == receiving_.end() ? nullptr : it->second;
}

void PipelineExecutor::fill_wait(const PipelineAction& a, bool train, const LastStageFn& last,
                                 const BeforeGradientsFn& before_gradients) {
  if (a.kind == PipelineAction::Kind::Weight) return;
  const WorkPtr receive = awaited_receive(a);
  if (!receive) return;
  // The next W in the plan's order only, so that each chunk's gradients accumulate in the
  // same order whatever the timing.
  while (!weights_ahead_.empty() && deferred_.contains(weights_ahead_.front()) && !receive->test()) {
    const auto [chunk, micro] = weights_ahead_.front();
    const PipelineAction w{PipelineAction::Kind::Weight, chunk, micro};
    run_pass(w, train, last, before_gradients);
    ++timing_.weights_early;
  }
}

Variable PipelineExecutor::forward_chunk(int chunk, const Variable& input, int micro, bool record,
                                         const LastStageFn& last, Variable* loss) {
  std::optional<AutocastGuard> guard;
  if (autocast_) guard.emplace(*autocast_);
  Variable output = chunks_[static_cast<std::size_t>(chunk)]->forward(input);
  if (is_last(chunk)) *loss = last(output, micro, record);
  return output;
}

void PipelineExecutor::forward(const PipelineAction& a, bool train, const LastStageFn& last) {
  const int c = virtual_stage(a.chunk);
  trace::Span span(trace::recording() ? fmt::format("forward {}", a.micro) : std::string(), trace::Phase::Forward);
  Tensor in_data;
  if (c == 0) {
    in_data = (*inputs_)[static_cast<std::size_t>(a.micro)];
  } else {
    in_data = take_input(Msg::Kind::Activation, c - 1, a.micro);
  }
  Live live;
  // A stage's input needs a gradient only to send it back to the stage before.
  live.input = Variable(in_data, /*requires_grad=*/train && c > 0);
  Variable output;
  if (train && config_.recompute) {
    // Run without a graph now and again with one in backward, from the same random
    // numbers (dropout): remember where the generator stood.
    live.rng_seed = default_generator().seed();
    live.rng_offset = default_generator().offset();
    NoGradGuard no_grad;
    output = forward_chunk(a.chunk, live.input, a.micro, /*record=*/true, last, &live.loss);
    live.loss = Variable();
  } else {
    output = forward_chunk(a.chunk, live.input, a.micro, /*record=*/true, last, &live.loss);
    live.output = output;
  }
  live.output_shape = output.data().shape();
  live.output_dtype = output.data().dtype();
  if (!is_last(a.chunk)) deliver(Msg::Kind::Activation, c, a.micro, c + 1) = output.data().contiguous();
  if (train) live_[{a.chunk, a.micro}] = std::move(live);
}

void PipelineExecutor::backward(const PipelineAction& a, const LastStageFn& last, bool whole) {
  const int c = virtual_stage(a.chunk);
  trace::Span span(trace::recording() ? fmt::format("backward {}", a.micro) : std::string(), trace::Phase::Backward);
  auto it = live_.find({a.chunk, a.micro});
  DTRAIN_CHECK(it != live_.end(), "pipeline: backward of chunk {} micro-batch {} before its forward", a.chunk, a.micro);
  // Kept in live_ until the gradient is in: over MPI its receive is posted here, sized
  // from the entry (receive_buffer).
  Live& live = it->second;
  if (config_.recompute) {
    Generator& gen = default_generator();
    const std::uint64_t seed = gen.seed(), offset = gen.offset();
    gen.set_state(live.rng_seed, live.rng_offset);
    live.output = forward_chunk(a.chunk, live.input, a.micro, /*record=*/false, last, &live.loss);
    gen.set_state(seed, offset);
  }
  // The loss's seed (as backward() seeds it), or the gradient the next stage sent.
  Variable& root = is_last(a.chunk) ? live.loss : live.output;
  Tensor seed;
  if (is_last(a.chunk)) {
    seed = Tensor::ones(live.loss.data().shape(), live.loss.data().options());
  } else {
    seed = take_input(Msg::Kind::Gradient, c, a.micro);
  }
  if (splits_backward(config_.schedule) && !whole) {
    deferred_[{a.chunk, a.micro}] = backward_inputs(root, seed, weights_[static_cast<std::size_t>(a.chunk)]);
  } else {
    root.backward(seed);
  }
  if (c > 0) {
    // A chunk whose output ignores its input (none of ours) would leave no gradient.
    Tensor grad = live.input.has_grad() ? live.input.grad().contiguous()
                                        : Tensor::zeros(live.input.data().shape(), live.input.data().options());
    deliver(Msg::Kind::Gradient, c - 1, a.micro, c - 1) = grad;
  }
  live_.erase(it);
}

void PipelineExecutor::weight(const PipelineAction& a) {
  trace::Span span(trace::recording() ? fmt::format("weight {}", a.micro) : std::string(), trace::Phase::Backward);
  auto it = deferred_.find({a.chunk, a.micro});
  DTRAIN_CHECK(it != deferred_.end(), "pipeline: weight pass of chunk {} micro-batch {} before its input pass", a.chunk,
               a.micro);
  DeferredWeightGradients w = std::move(it->second);
  deferred_.erase(it);
  w.run();
}

Tensor PipelineExecutor::receive_buffer(const Msg& m) {
  if (m.kind == Msg::Kind::Gradient) {
    // The gradient of the activation this rank sent has that activation's shape.
    const Live& live = live_.at({chunk_of(m.boundary), m.micro});
    return Tensor::empty(live.output_shape, {live.output_dtype, config_.device});
  }
  const std::int64_t rows = (*inputs_)[static_cast<std::size_t>(m.micro)].size(0);
  auto known = learned_.find({m.boundary, rows});
  if (known == learned_.end()) {
    Tensor h = Tensor::zeros({2 + kMaxDims}, {DType::i64});
    config_.comm->recv(h, m.peer, header_tag(m.boundary));
    known = learned_.emplace(std::pair{m.boundary, rows}, decode_header(h)).first;
  }
  return Tensor::empty(known->second.first, {known->second.second, config_.device});
}

Tensor PipelineExecutor::take_input(Msg::Kind kind, int boundary, int micro) {
  const std::tuple key{static_cast<int>(kind), boundary, micro};
  if (auto pending = receiving_.find(key); pending != receiving_.end()) {
    // Waited for only now, as the pass that needs it runs: nothing waits earlier.
    const auto start = Clock::now();
    trace::Span span("receive wait", trace::Phase::Communication);
    pending->second->wait();
    receiving_.erase(pending);
    timing_.wait_s += seconds_since(start);
  }
  auto it = inbox_.find(key);
  DTRAIN_CHECK(it != inbox_.end(), "pipeline: rank {} has no {} for boundary {} micro-batch {}", rank_,
               kind == Msg::Kind::Activation ? "activation" : "gradient", boundary, micro);
  Tensor t = std::move(it->second);
  inbox_.erase(it);
  return t;
}

void PipelineExecutor::exchange(const std::vector<Msg>& messages) {
  if (messages.empty()) return;
  const auto start = Clock::now();
  trace::Span span("send/receive", trace::Phase::Communication);
  auto key = [](const Msg& m) { return std::tuple{static_cast<int>(m.kind), m.boundary, m.micro}; };
  // Headers of first-seen activation sizes go out before anything waits.
  for (const Msg& m : messages) {
    if (!m.send || m.kind != Msg::Kind::Activation) continue;
    const Tensor& t = outbox_.at(key(m));
    if (announced_.insert({m.boundary, t.size(0)}).second) {
      Tensor h = encode_header(t);
      sends_.emplace_back(config_.comm->isend(h, m.peer, header_tag(m.boundary)), h);
    }
  }
  std::vector<P2POp> ops;
  for (const Msg& m : messages) {
    if (!m.send) continue;
    auto it = outbox_.find(key(m));
    ops.push_back(P2POp::send(it->second, m.peer, tag(m)));
    outbox_.erase(it);
  }
  // Over MPI the sends go now, before this rank may wait for a header below; NCCL's go in
  // one batch with the receives (its sends wait for their receives: see the schedule).
  const bool batch_sends = config_.tensor_comm->backend() == "nccl";
  if (!batch_sends && !ops.empty()) {
    std::vector<WorkPtr> works = config_.tensor_comm->batch_isend_irecv(ops);
    // MPI's engine holds a send's tensor until the message is done (communicator.h), so
    // an activation is freed as soon as both its send and its backward are: under 1F1B a
    // stage then holds at most K micro-batches' activations, not all M until the end.
    for (WorkPtr& w : works) sends_.emplace_back(std::move(w), Tensor());
    ops.clear();
  }
  const std::size_t first_recv = ops.size();
  std::vector<std::tuple<int, int, int>> received;
  for (const Msg& m : messages) {
    if (m.send) continue;
    Tensor buffer = receive_buffer(m);
    ops.push_back(P2POp::recv(buffer, m.peer, tag(m)));
    inbox_[key(m)] = buffer;
    received.push_back(key(m));
  }
  // The receives are posted now, in the plan's order, and waited for by the passes that
  // need them (take_input).
  std::vector<WorkPtr> works = ops.empty() ? std::vector<WorkPtr>{} : config_.tensor_comm->batch_isend_irecv(ops);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (i < first_recv) sends_.emplace_back(works[i], ops[i].tensor);
    else receiving_[received[i - first_recv]] = works[i];
  }
  timing_.wait_s += seconds_since(start);
}

}  // namespace dtrain::dist
