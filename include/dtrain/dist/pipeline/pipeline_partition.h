// Where to cut a Sequential into consecutive pipeline parts. A cut list for P parts of L
// layers holds P - 1 increasing layer indices in (0, L): part i holds layers
// [cut[i-1], cut[i]) (with cut[-1] = 0 and cut[P-1] = L).
#pragma once

#include "dtrain/layers/sequential.h"

#include <vector>

namespace dtrain::dist {

// Throws, with the reason, unless `cuts` splits `layers` layers into `parts` non-empty
// parts ("more stages than layers" among them).
void check_cuts(const std::vector<int>& cuts, int layers, int parts);

// The cuts that make the costliest part as cheap as possible (exact, by dynamic
// programming); among those, the ones with the fewest parts without cost; among those,
// each cut as late as it can be, so a layer without cost (an activation, a pooling) stays
// with the layer before it.
std::vector<int> balanced_cuts(const std::vector<double>& costs, int parts);

// A layer's forward and backward time.
struct LayerCost {
  double forward = 0, backward = 0;
};
// The same balance where part p costs its layers' forward + backward, plus their forward
// once more when recomputes[p] (its forward runs again in backward): cuts that let the
// recomputing parts hold fewer layers.
std::vector<int> balanced_cuts(const std::vector<LayerCost>& costs, const std::vector<bool>& recomputes);

// Each layer's parameter count.
std::vector<double> parameter_costs(const nn::Sequential& model);

// Each layer's forward and backward time in seconds on `example` (a batch of the model's
// input, on the model's device), the medians of `repeats` runs after one warm-up. The
// model is left in training mode with no gradients.
std::vector<LayerCost> measured_layer_costs(nn::Sequential& model, const Tensor& example, int repeats = 3);
// Their sums, forward plus backward.
std::vector<double> measured_costs(nn::Sequential& model, const Tensor& example, int repeats = 3);

}  // namespace dtrain::dist
