// The names of element ranges (private to train): "<parameter>[begin:end]<suffix>", a flat
// range of a parameter's elements, as ranks that hold shares of a parameter name their
// entries in checkpoints (joined by the Checkpointer) and in snapshots (spread back by the
// guard's StateSnapshot); "<parameter>[d<dim>:begin:end]<suffix>", the indices begin to end
// along one dimension (the other dimensions whole), as tensor-parallel ranks save slices.
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
  int dim = -1;  // -1: flat elements
};

// nullopt when `key` is not of that form or its parameter is not in `shapes`.
inline std::optional<RangeKey> parse_range_key(const std::string& key,
                                               const std::unordered_map<std::string, Shape>& shapes) {
  const auto open = key.find('['), colon = key.find(':', open), close = key.find(']', open);
  if (open == std::string::npos || colon == std::string::npos || close == std::string::npos || colon > close ||
      !shapes.count(key.substr(0, open))) {
    return std::nullopt;
  }
  RangeKey r{.parameter = key.substr(0, open), .suffix = key.substr(close + 1)};
  std::string inside = key.substr(open + 1, close - open - 1);
  if (!inside.empty() && inside[0] == 'd') {
    const auto first = inside.find(':');
    r.dim = std::stoi(inside.substr(1, first - 1));
    inside = inside.substr(first + 1);
  }
  const auto mid = inside.find(':');
  if (mid == std::string::npos) return std::nullopt;
  r.begin = std::stoll(inside.substr(0, mid));
  r.end = std::stoll(inside.substr(mid + 1));
  return r;
}

}  // namespace dtrain::train
