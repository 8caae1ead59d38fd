// The names of element ranges (private to train): "<parameter>[begin:end]<suffix>", a flat
// range of a parameter's elements, as ranks that hold shares of a parameter name their
// entries in checkpoints (joined by the Checkpointer) and in snapshots (spread back by the
// guard's StateSnapshot).
#pragma once

#include "dtrain/tensor/shape.h"

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

namespace dtrain::train {

struct RangeKey {
  std::string parameter, suffix;
  std::int64_t begin = 0, end = 0;
};

// nullopt when `key` is not of that form or its parameter is not in `shapes`.
inline std::optional<RangeKey> parse_range_key(const std::string& key,
                                               const std::unordered_map<std::string, Shape>& shapes) {
  const auto open = key.find('['), colon = key.find(':', open), close = key.find(']', open);
  if (open == std::string::npos || colon == std::string::npos || close == std::string::npos || colon > close ||
      !shapes.count(key.substr(0, open))) {
    return std::nullopt;
  }
  return RangeKey{.parameter = key.substr(0, open),
                  .suffix = key.substr(close + 1),
                  .begin = std::stoll(key.substr(open + 1, colon - open - 1)),
                  .end = std::stoll(key.substr(colon + 1, close - colon - 1))};
}

}  // namespace dtrain::train
