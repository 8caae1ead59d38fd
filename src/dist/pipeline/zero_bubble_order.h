// The order of the zero-bubble schedules' passes (private to dist; pipeline_schedule.h
// describes them).
#pragma once

#include "dtrain/dist/pipeline/pipeline_schedule.h"

#include <vector>

namespace dtrain::dist {

// ZB-H1: stage `stage`'s passes (one chunk per rank).
std::vector<PipelineAction> zb_h1_order(const PipelineShape& shape, int stage);

// ZB-V: every rank's passes (two chunks per rank in the V shape), from running the
// schedule's rule for all of them at once with every pass taking one unit of time.
// forward_only: the forwards alone (evaluation), in the same way.
std::vector<std::vector<PipelineAction>> zb_v_orders(const PipelineShape& shape, bool forward_only);

}  // namespace dtrain::dist
