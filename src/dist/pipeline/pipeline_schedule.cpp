#include "dtrain/dist/pipeline/pipeline_schedule.h"

#include "dtrain/core/error.h"

#include <algorithm>

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
  }
  return "?";
}

PipelineSchedule parse_schedule(const std::string& name) {
  for (auto s : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB, PipelineSchedule::Interleaved}) {
    if (name == schedule_name(s)) return s;
  }
  DTRAIN_FAIL("pipeline schedule '{}': expected gpipe, 1f1b or interleaved", name);
}

void check_schedule(PipelineSchedule schedule, const PipelineShape& shape) {
  DTRAIN_CHECK(shape.stages >= 1, "pipeline: stages must be >= 1, got {}", shape.stages);
  DTRAIN_CHECK(shape.micro_batches >= 1, "pipeline: micro-batches must be >= 1, got {}", shape.micro_batches);
  if (schedule != PipelineSchedule::Interleaved) {
    DTRAIN_CHECK(shape.virtual_stages == 1, "pipeline schedule {}: one chunk per rank (virtual stages 1), got {}",
                 schedule_name(schedule), shape.virtual_stages);
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

PipelinePlan schedule_plan(PipelineSchedule schedule, const PipelineShape& shape, int stage, bool forward_only) {
  const int K = shape.stages;
  const int last = K * shape.virtual_stages - 1;  // the last virtual stage
  const std::vector<PipelineAction> actions = schedule_actions(schedule, shape, stage, forward_only);
  using Msg = PipelineMessage;
  // What a pass receives before it runs and sends after it.
  auto inputs = [&](const PipelineAction& a) {
    std::vector<Msg> out;
    const int c = a.chunk * K + stage;
    if (a.kind == Kind::Forward && c > 0) out.push_back({Msg::Kind::Activation, false, (c - 1) % K, c - 1, a.micro});
    if (a.kind == Kind::Backward && c < last) out.push_back({Msg::Kind::Gradient, false, (c + 1) % K, c, a.micro});
    return out;
  };
  auto outputs = [&](const PipelineAction& a) {
    std::vector<Msg> out;
    const int c = a.chunk * K + stage;
    if (a.kind == Kind::Forward && c < last) out.push_back({Msg::Kind::Activation, true, (c + 1) % K, c, a.micro});
    if (a.kind == Kind::Backward && c > 0) out.push_back({Msg::Kind::Gradient, true, (c - 1) % K, c - 1, a.micro});
    return out;
  };
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

}  // namespace dtrain::dist
