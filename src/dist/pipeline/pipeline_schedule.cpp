#include "dtrain/dist/pipeline/pipeline_schedule.h"

#include "dist/pipeline/schedule_simulation.h"
#include "dist/pipeline/zero_bubble_order.h"
#include "dtrain/core/error.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace dtrain::dist {
namespace {

using Kind = PipelineAction::Kind;

// The k-th forward (or backward) pass of an interleaved rank: micro-batches go through
// the chunks K at a time (forwards chunk 0 first, backwards the last chunk first).
PipelineAction interleaved_pass(const PipelineShape& shape, int k, Kind kind) {
  const int K = shape.stages, V = shape.virtual_stages;
  const int group = k / (K * V), within = k % (K * V);
  const int chunk = within / K;
  return {kind, kind == Kind::Forward ? chunk : V - 1 - chunk, group * K + within % K};
}

// 1F1B's shape for `passes` forwards and as many backwards: `warmup` forwards, then one
// forward and one backward in turn, then the remaining backwards. pass(k, kind) names the
// k-th pass of each kind.
template <class PassFn>
std::vector<PipelineAction> one_f_one_b(int passes, int warmup, PassFn pass) {
  std::vector<PipelineAction> out;
  warmup = std::min(warmup, passes);
  for (int k = 0; k < warmup; ++k) out.push_back(pass(k, Kind::Forward));
  for (int k = 0; k + warmup < passes; ++k) {
    out.push_back(pass(k + warmup, Kind::Forward));
    out.push_back(pass(k, Kind::Backward));
  }
  for (int k = passes - warmup; k < passes; ++k) out.push_back(pass(k, Kind::Backward));
  return out;
}

}  // namespace

const char* schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::GPipe: return "gpipe";
    case PipelineSchedule::OneFOneB: return "1f1b";
    case PipelineSchedule::Interleaved: return "interleaved";
    case PipelineSchedule::ZeroBubbleH1: return "zb-h1";
    case PipelineSchedule::ZeroBubbleV: return "zb-v";
  }
  return "?";
}

PipelineSchedule parse_schedule(const std::string& name) {
  for (auto s : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB, PipelineSchedule::Interleaved,
                 PipelineSchedule::ZeroBubbleH1, PipelineSchedule::ZeroBubbleV}) {
    if (name == schedule_name(s)) return s;
  }
  DTRAIN_FAIL("pipeline schedule '{}': expected gpipe, 1f1b, interleaved, zb-h1 or zb-v", name);
}

bool splits_backward(PipelineSchedule s) {
  return s == PipelineSchedule::ZeroBubbleH1 || s == PipelineSchedule::ZeroBubbleV;
}

int fixed_virtual_stages(PipelineSchedule s) {
  if (s == PipelineSchedule::Interleaved) return 0;
  return s == PipelineSchedule::ZeroBubbleV ? 2 : 1;
}

int virtual_stage_of(PipelineSchedule schedule, const PipelineShape& shape, int stage, int chunk) {
  if (schedule == PipelineSchedule::ZeroBubbleV) return chunk == 0 ? stage : 2 * shape.stages - 1 - stage;
  return chunk * shape.stages + stage;
}

int stage_of(PipelineSchedule schedule, const PipelineShape& shape, int virtual_stage) {
  const int K = shape.stages;
  if (schedule == PipelineSchedule::ZeroBubbleV) return virtual_stage < K ? virtual_stage : 2 * K - 1 - virtual_stage;
  return virtual_stage % K;
}

void check_schedule(PipelineSchedule schedule, const PipelineShape& shape) {
  DTRAIN_CHECK(shape.stages >= 1, "pipeline: stages must be >= 1, got {}", shape.stages);
  DTRAIN_CHECK(shape.micro_batches >= 1, "pipeline: micro-batches must be >= 1, got {}", shape.micro_batches);
  if (schedule != PipelineSchedule::Interleaved) {
    const int v = fixed_virtual_stages(schedule);
    DTRAIN_CHECK(shape.virtual_stages == v, "pipeline schedule {}: {} per rank (virtual stages {}), got {}",
                 schedule_name(schedule), v == 1 ? "one chunk" : "two chunks", v, shape.virtual_stages);
    return;
  }
  DTRAIN_CHECK(shape.stages >= 2, "pipeline schedule interleaved: needs >= 2 stages, got {}", shape.stages);
  DTRAIN_CHECK(shape.virtual_stages >= 2,
               "pipeline schedule interleaved: needs >= 2 virtual stages (chunks) per rank, got {}",
               shape.virtual_stages);
  DTRAIN_CHECK(shape.micro_batches % shape.stages == 0,
               "pipeline schedule interleaved: micro-batches ({}) must be a multiple of the stages ({}), since "
               "micro-batches pass through each chunk {} at a time",
               shape.micro_batches, shape.stages, shape.stages);
}

std::vector<PipelineAction> schedule_actions(PipelineSchedule schedule, const PipelineShape& shape, int stage,
                                             bool forward_only) {
  check_schedule(schedule, shape);
  DTRAIN_CHECK(stage >= 0 && stage < shape.stages, "pipeline: stage {} out of range [0, {})", stage, shape.stages);
  const int K = shape.stages, M = shape.micro_batches;
  std::vector<PipelineAction> out;
  if (schedule == PipelineSchedule::ZeroBubbleV)
    return zb_v_orders(shape, forward_only)[static_cast<std::size_t>(stage)];
  if (schedule == PipelineSchedule::ZeroBubbleH1 && !forward_only) return zb_h1_order(shape, stage);
  if (schedule == PipelineSchedule::Interleaved) {
    const int passes = M * shape.virtual_stages;
    // Megatron-LM's warm-up: the chunks ahead of this rank filled once more for each
    // later chunk; all forwards first when there is no steady state to reach.
    const int warmup = forward_only || M == K ? passes : (K - stage - 1) * 2 + (shape.virtual_stages - 1) * K;
    out = one_f_one_b(passes, warmup, [&](int k, Kind kind) { return interleaved_pass(shape, k, kind); });
  } else {
    const bool gpipe = forward_only || schedule == PipelineSchedule::GPipe;
    out = one_f_one_b(M, gpipe ? M : K - stage - 1, [](int k, Kind kind) { return PipelineAction{kind, 0, k}; });
  }
  if (forward_only) std::erase_if(out, [](const PipelineAction& a) { return a.kind == Kind::Backward; });
  return out;
}

namespace {

using Msg = PipelineMessage;

// What a pass of rank `stage` receives before it runs and sends after it; nothing between
// two chunks of one rank (ZB-V's turn), which the executor hands over itself.
std::vector<Msg> pass_messages(PipelineSchedule schedule, const PipelineShape& shape, int stage,
                               const PipelineAction& a, bool send) {
  const int last = shape.stages * shape.virtual_stages - 1;  // the last virtual stage
  const int c = virtual_stage_of(schedule, shape, stage, a.chunk);
  // The neighbour a forward talks to is the next stage when sending and the previous one
  // when receiving; a backward's the other way round.
  const bool downstream = (a.kind == Kind::Forward) == send;
  const int other = downstream ? c + 1 : c - 1;
  if (a.kind == Kind::Weight || other < 0 || other > last) return {};
  const int peer = stage_of(schedule, shape, other);
  if (peer == stage) return {};
  const Msg::Kind kind = a.kind == Kind::Forward ? Msg::Kind::Activation : Msg::Kind::Gradient;
  // An activation crosses boundary min(c, other) forwards, its gradient backwards.
  return {{kind, send, peer, std::min(c, other), a.micro}};
}

// The zero-bubble plans: every rank's passes placed in time by simulating them all with
// equal pass times (schedule_simulation.h); a pass's messages go out in the batch of the
// time its pass ends, on both sides. Batches of one time on two ranks are current together,
// so no two ranks can wait on each other under either transport, and the messages between
// any two ranks are in the same order on both.
PipelinePlan time_slotted_plan(PipelineSchedule schedule, const PipelineShape& shape, int stage, bool forward_only) {
  const int K = shape.stages;
  std::vector<std::vector<PipelineAction>> orders;
  for (int s = 0; s < K; ++s) orders.push_back(schedule_actions(schedule, shape, s, forward_only));
  const ScheduleSimulation sim = simulate_schedule(schedule, shape, orders, {PassTimes{1, 1, 1}});
  // When each message's pass ends (ticks: every pass takes 1).
  std::map<std::tuple<int, int, int>, int> sent_at;  // message kind, boundary, micro
  for (int s = 0; s < K; ++s) {
    const auto& order = orders[static_cast<std::size_t>(s)];
    for (std::size_t i = 0; i < order.size(); ++i) {
      for (const Msg& m : pass_messages(schedule, shape, s, order[i], /*send=*/true)) {
        sent_at[{static_cast<int>(m.kind), m.boundary, m.micro}] =
            static_cast<int>(sim.start[static_cast<std::size_t>(s)][i]) + 1;
      }
    }
  }
  const auto& mine = orders[static_cast<std::size_t>(stage)];
  const auto& starts = sim.start[static_cast<std::size_t>(stage)];
  std::map<int, std::vector<Msg>> batch_at;  // tick -> this rank's messages then
  std::map<int, PipelineAction> pass_at;     // tick -> this rank's pass then
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const int tick = static_cast<int>(starts[i]);
    pass_at[tick] = mine[i];
    for (const Msg& m : pass_messages(schedule, shape, stage, mine[i], /*send=*/true)) batch_at[tick + 1].push_back(m);
  }
  for (std::size_t i = 0; i < mine.size(); ++i) {  // receives after the sends of their tick
    for (const Msg& m : pass_messages(schedule, shape, stage, mine[i], /*send=*/false)) {
      batch_at[sent_at.at({static_cast<int>(m.kind), m.boundary, m.micro})].push_back(m);
    }
  }
  PipelinePlan plan;
  const int end = mine.empty() ? 0 : static_cast<int>(starts.back()) + 1;
  for (int tick = 0; tick < end; ++tick) {
    PipelineStep step;
    if (auto b = batch_at.find(tick); b != batch_at.end()) step.messages = b->second;
    if (auto p = pass_at.find(tick); p != pass_at.end()) step.actions.push_back(p->second);
    if (!step.messages.empty() || !step.actions.empty()) plan.steps.push_back(std::move(step));
  }
  if (auto b = batch_at.find(end); b != batch_at.end()) plan.tail = b->second;
  return plan;
}

}  // namespace

PipelinePlan schedule_plan(PipelineSchedule schedule, const PipelineShape& shape, int stage, bool forward_only) {
  if (splits_backward(schedule)) return time_slotted_plan(schedule, shape, stage, forward_only);
  const std::vector<PipelineAction> actions = schedule_actions(schedule, shape, stage, forward_only);
  auto inputs = [&](const PipelineAction& a) { return pass_messages(schedule, shape, stage, a, /*send=*/false); };
  auto outputs = [&](const PipelineAction& a) { return pass_messages(schedule, shape, stage, a, /*send=*/true); };
  // The interleaved steady state pairs each forward with the backward after it; without
  // a steady state (every forward first) nothing is paired.
  const auto leading =
      std::find_if(actions.begin(), actions.end(), [](const PipelineAction& a) { return a.kind == Kind::Backward; }) -
      actions.begin();
  const bool pair = schedule == PipelineSchedule::Interleaved &&
                    leading < static_cast<std::ptrdiff_t>(shape.micro_batches * shape.virtual_stages);
  std::vector<std::vector<PipelineAction>> groups;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (pair && actions[i].kind == Kind::Forward && i + 1 < actions.size() && actions[i + 1].kind == Kind::Backward) {
      groups.push_back({actions[i], actions[i + 1]});
      ++i;
    } else {
      groups.push_back({actions[i]});
    }
  }
  PipelinePlan plan;
  std::vector<Msg> pending;  // the previous step's sends
  for (auto& group : groups) {
    PipelineStep step{std::move(pending), std::move(group)};
    pending.clear();
    for (const PipelineAction& a : step.actions) {
      for (Msg& m : inputs(a)) step.messages.push_back(m);
      for (Msg& m : outputs(a)) pending.push_back(m);
    }
    plan.steps.push_back(std::move(step));
  }
  plan.tail = std::move(pending);
  return plan;
}

double theoretical_bubble(const PipelineShape& shape) {
  const double k = shape.stages, m = shape.micro_batches, v = shape.virtual_stages;
  return (k - 1) / (v * (m + k - 1));
}

double simulated_bubble(PipelineSchedule schedule, const PipelineShape& shape, const std::vector<PassTimes>& times) {
  std::vector<std::vector<PipelineAction>> orders;
  for (int s = 0; s < shape.stages; ++s) orders.push_back(schedule_actions(schedule, shape, s));
  const ScheduleSimulation sim = simulate_schedule(schedule, shape, orders, times);
  double idle = 0;
  for (double busy : sim.busy) idle += sim.span > 0 ? 1 - busy / sim.span : 0;
  return idle / shape.stages;
}

}  // namespace dtrain::dist
