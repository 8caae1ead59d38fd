#include "dtrain/dist/pipeline/pipeline_partition.h"

#include "dtrain/core/error.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace dtrain::dist {

void check_cuts(const std::vector<int>& cuts, int layers, int parts) {
  DTRAIN_CHECK(parts >= 1, "pipeline: parts must be >= 1, got {}", parts);
  DTRAIN_CHECK(parts <= layers, "pipeline: {} parts (stages x virtual stages) but the model has only {} layers", parts,
               layers);
  DTRAIN_CHECK(static_cast<int>(cuts.size()) == parts - 1, "pipeline: {} cut points given, {} parts need {}",
               cuts.size(), parts, parts - 1);
  int previous = 0;
  for (std::size_t i = 0; i < cuts.size(); ++i) {
    DTRAIN_CHECK(cuts[i] > previous && cuts[i] < layers,
                 "pipeline: cut point {} ({}) must lie after the previous one ({}) and before the layer count ({}), "
                 "so that every part holds a layer",
                 i, cuts[i], previous, layers);
    previous = cuts[i];
  }
}

namespace {

// The DP behind both balanced_cuts: part_cost(p, j, i) is part p's cost if it holds layers
// [j, i).
template <class PartCost>
std::vector<int> balance(int n, int parts, PartCost part_cost) {
  DTRAIN_CHECK(parts >= 1 && parts <= n,
               "pipeline: {} parts (stages x virtual stages) but the model has only {} layers", parts, n);
  // best[p][i]: over layers [0, i) in p parts, the cheapest costliest part, then the fewest
  // parts without cost (a stage of activations alone has nothing to train); from[p][i]:
  // where its last part starts.
  using Score = std::pair<double, int>;
  const Score none{std::numeric_limits<double>::infinity(), 0};
  std::vector<std::vector<Score>> best(static_cast<std::size_t>(parts) + 1,
                                       std::vector<Score>(static_cast<std::size_t>(n) + 1, none));
  std::vector<std::vector<int>> from(best.size(), std::vector<int>(best[0].size(), 0));
  best[0][0] = {0, 0};
  for (int p = 1; p <= parts; ++p) {
    for (int i = p; i <= n; ++i) {
      for (int j = p - 1; j < i; ++j) {
        const double part = part_cost(p - 1, j, i);
        const Score v{std::max(best[p - 1][j].first, part), best[p - 1][j].second + (part == 0 ? 1 : 0)};
        if (v <= best[p][i]) {  // `<=`: the latest start among equals
          best[p][i] = v;
          from[p][i] = j;
        }
      }
    }
  }
  std::vector<int> cuts(static_cast<std::size_t>(parts) - 1);
  for (int p = parts, i = n; p > 1; --p) {
    i = from[p][i];
    cuts[static_cast<std::size_t>(p) - 2] = i;
  }
  return cuts;
}

std::vector<double> prefix_sums(const std::vector<double>& v) {
  std::vector<double> prefix(v.size() + 1, 0);
  for (std::size_t i = 0; i < v.size(); ++i) prefix[i + 1] = prefix[i] + v[i];
  return prefix;
}

}  // namespace

std::vector<int> balanced_cuts(const std::vector<double>& costs, int parts) {
  const std::vector<double> prefix = prefix_sums(costs);
  return balance(static_cast<int>(costs.size()), parts, [&](int, int j, int i) { return prefix[i] - prefix[j]; });
}

std::vector<int> balanced_cuts(const std::vector<LayerCost>& costs, const std::vector<bool>& recomputes) {
  std::vector<double> forward, backward;
  for (const LayerCost& c : costs) {
    forward.push_back(c.forward);
    backward.push_back(c.backward);
  }
  const std::vector<double> f = prefix_sums(forward), b = prefix_sums(backward);
  return balance(static_cast<int>(costs.size()), static_cast<int>(recomputes.size()), [&](int p, int j, int i) {
    const double once = f[i] - f[j] + b[i] - b[j];
    return recomputes[static_cast<std::size_t>(p)] ? once + f[i] - f[j] : once;
  });
}

std::vector<double> parameter_costs(const nn::Sequential& model) {
  std::vector<double> out;
  for (std::size_t i = 0; i < model.size(); ++i) out.push_back(static_cast<double>(model[i]->num_parameters()));
  return out;
}

std::vector<LayerCost> measured_layer_costs(nn::Sequential& model, const Tensor& example, int repeats) {
  DTRAIN_CHECK(repeats >= 1, "measured_costs: repeats must be >= 1, got {}", repeats);
  using Clock = std::chrono::steady_clock;
  // Reading one element waits for a GPU's queued kernels (free on the CPU).
  auto wait_for = [](const Tensor& t) { (void)t.reshape({-1}).narrow(0, 0, 1).to(Device::cpu()).item(); };
  auto seconds_since = [](Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  model.train();
  std::vector<std::vector<double>> forwards(model.size()), backwards(model.size());
  for (int r = 0; r <= repeats; ++r) {  // run 0 warms up
    Tensor x = example;
    for (std::size_t i = 0; i < model.size(); ++i) {
      auto start = Clock::now();
      Variable in(x, /*requires_grad=*/true);
      Variable out = model[i]->forward(in);
      wait_for(out.data());
      const double forward = seconds_since(start);
      start = Clock::now();
      out.backward(Tensor::ones(out.data().shape(), out.data().options()));
      wait_for(in.has_grad() ? in.grad() : out.data());
      const double backward = seconds_since(start);
      x = out.data();
      if (r > 0) {
        forwards[i].push_back(forward);
        backwards[i].push_back(backward);
      }
    }
  }
  model.zero_grad();
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  std::vector<LayerCost> costs;
  for (std::size_t i = 0; i < model.size(); ++i) costs.push_back({median(forwards[i]), median(backwards[i])});
  return costs;
}

std::vector<double> measured_costs(nn::Sequential& model, const Tensor& example, int repeats) {
  std::vector<double> out;
  for (const LayerCost& c : measured_layer_costs(model, example, repeats)) out.push_back(c.forward + c.backward);
  return out;
}

}  // namespace dtrain::dist
