#include "dist/pipeline/schedule_simulation.h"

#include "dtrain/core/error.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

namespace dtrain::dist {

ScheduleSimulation simulate_schedule(PipelineSchedule schedule, const PipelineShape& shape,
                                     const std::vector<std::vector<PipelineAction>>& orders,
                                     const std::vector<PassTimes>& times) {
  using Kind = PipelineAction::Kind;
  const int K = shape.stages, last = K * shape.virtual_stages - 1;
  DTRAIN_CHECK(static_cast<int>(orders.size()) == K, "pipeline simulation: {} orders for {} stages", orders.size(), K);
  const int V = shape.virtual_stages;
  DTRAIN_CHECK(times.size() == 1 || static_cast<int>(times.size()) == K || static_cast<int>(times.size()) == K * V,
               "pipeline simulation: pass times for {} stages, expected 1, {} (per rank) or {} (per virtual stage)",
               times.size(), K, K * V);
  const bool per_virtual_stage = static_cast<int>(times.size()) == K * V;
  const bool split = splits_backward(schedule);
  using PassId = std::tuple<int, int, int>;  // kind, virtual stage, micro
  std::map<PassId, double> ended;
  ScheduleSimulation out;
  out.start.assign(static_cast<std::size_t>(K), {});
  out.busy.assign(static_cast<std::size_t>(K), 0.0);
  std::vector<double> free_at(static_cast<std::size_t>(K), 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < K; ++s) {
      const auto r = static_cast<std::size_t>(s);
      auto& started = out.start[r];
      while (started.size() < orders[r].size()) {
        const PipelineAction& a = orders[r][started.size()];
        const int c = virtual_stage_of(schedule, shape, s, a.chunk);
        const PassTimes& t = times.size() == 1   ? times[0]
                             : per_virtual_stage ? times[static_cast<std::size_t>(c)]
                                                 : times[r];
        std::optional<PassId> needs;
        double duration = t.forward;
        if (a.kind == Kind::Forward) {
          if (c > 0) needs = PassId{static_cast<int>(Kind::Forward), c - 1, a.micro};
        } else if (a.kind == Kind::Backward) {
          needs = c == last ? PassId{static_cast<int>(Kind::Forward), c, a.micro}
                            : PassId{static_cast<int>(Kind::Backward), c + 1, a.micro};
          duration = split ? t.backward : t.backward + t.weight;
        } else {
          needs = PassId{static_cast<int>(Kind::Backward), c, a.micro};
          duration = t.weight;
        }
        double begin = free_at[r];
        if (needs) {
          auto it = ended.find(*needs);
          if (it == ended.end()) break;
          begin = std::max(begin, it->second);
        }
        started.push_back(begin);
        free_at[r] = begin + duration;
        out.busy[r] += duration;
        ended[{static_cast<int>(a.kind), c, a.micro}] = free_at[r];
        progress = true;
      }
    }
  }
  for (int s = 0; s < K; ++s) {
    const auto r = static_cast<std::size_t>(s);
    DTRAIN_CHECK(out.start[r].size() == orders[r].size(),
                 "pipeline simulation: stage {} stalls at its pass {} of {}: it waits for a pass that never runs", s,
                 out.start[r].size(), orders[r].size());
    out.span = std::max(out.span, free_at[r]);
  }
  return out;
}

}  // namespace dtrain::dist
