// What the Trainer's parts share (private to train): a rank's numbers added up over the
// ranks that hold shards, through the strategy (a collective).
#pragma once

#include "dtrain/dist/strategy/strategy.h"

#include <vector>

namespace dtrain::train {

inline std::vector<double> over_ranks(dist::Strategy& strategy, const std::vector<double>& local) {
  Tensor t = Tensor::from_vector<double>(local, {static_cast<std::int64_t>(local.size())});
  strategy.reduce_sums(t);
  return t.to_vector<double>();
}

}  // namespace dtrain::train
