// A pipeline step on paper (private to dist): every rank runs its passes in the given
// order, each as soon as the passes it needs have ended on their ranks (a forward needs the
// previous virtual stage's forward, a backward the next one's backward or, on the last
// virtual stage, its own forward, a W its own B), messages taking no time. Gives the
// zero-bubble plans their order (zero_bubble_order.cpp) and simulated_bubble its figure.
#pragma once

#include "dtrain/dist/pipeline/pipeline_schedule.h"

#include <vector>

namespace dtrain::dist {

struct ScheduleSimulation {
  std::vector<std::vector<double>> start;  // [rank][pass]: when each pass begins
  std::vector<double> busy;                // [rank]: the time in its passes
  double span = 0;                         // when the last pass ends
};

// `orders[s]`: rank s's passes; their durations: times[0] for every pass, times[s] for rank
// s's, or times[c] for virtual stage c's (K x V entries: a rank's chunks can differ, as ZB-V's
// first and last chunk, on one rank, do from its middle ones).
// Throws when the orders cannot all run to the end (a pass waits for one that never runs).
ScheduleSimulation simulate_schedule(PipelineSchedule schedule, const PipelineShape& shape,
                                     const std::vector<std::vector<PipelineAction>>& orders,
                                     const std::vector<PassTimes>& times);

}  // namespace dtrain::dist
