// One log setup for the whole process: spdlog's default logger, every line prefixed by
// the rank. Rank 0 speaks at info, the others at warn, unless DTRAIN_LOG_LEVEL says
// otherwise (trace, debug, info, warn, error, off). Library code logs through spdlog.
#pragma once

#include <spdlog/spdlog.h>

namespace dtrain::logging {

void init(int rank = 0, int world_size = 1);

}  // namespace dtrain::logging
