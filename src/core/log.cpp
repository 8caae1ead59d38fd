#include "dtrain/core/log.h"

#include "dtrain/core/environment.h"
#include "dtrain/core/error.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace dtrain::logging {

void init(int rank, int world_size) {
  auto logger = spdlog::stderr_color_mt(fmt::format("dtrain-{}", rank));
  if (world_size > 1) {
    logger->set_pattern(fmt::format("[%H:%M:%S.%e] [rank {}] [%^%l%$] %v", rank));
  } else {
    logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  }
  spdlog::level::level_enum level = rank == 0 ? spdlog::level::info : spdlog::level::warn;
  if (auto text = env::get("DTRAIN_LOG_LEVEL")) {
    level = spdlog::level::from_str(*text);
    DTRAIN_CHECK(level != spdlog::level::off || *text == "off",
                 "environment variable DTRAIN_LOG_LEVEL='{}': expected trace, debug, info, warn, error or off",
                 *text);
  }
  logger->set_level(level);
  spdlog::set_default_logger(logger);
}

}  // namespace dtrain::logging
