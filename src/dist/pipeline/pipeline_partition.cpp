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

std::vector<int> balanced_cuts(const std::vector<double>& costs, int parts) {
  const int n = static_cast<int>(costs.size());
  DTRAIN_CHECK(parts >= 1 && parts <= n,
               "pipeline: {} parts (stages x virtual stages) but the model has only {} layers", parts, n);
  std::vector<double> prefix(static_cast<std::size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[static_cast<std::size_t>(i)];
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
        const double part = prefix[i] - prefix[j];
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

std::vector<double> parameter_costs(const nn::Sequential& model) {
  std::vector<double> out;
  for (std::size_t i = 0; i < model.size(); ++i) out.push_back(static_cast<double>(model[i]->num_parameters()));
  return out;
}

std::vector<double> measured_costs(nn::Sequential& model, const Tensor& example, int repeats) {
  DTRAIN_CHECK(repeats >= 1, "measured_costs: repeats must be >= 1, got {}", repeats);
  using Clock = std::chrono::steady_clock;
  model.train();
  std::vector<std::vector<double>> runs(model.size());
  for (int r = 0; r <= repeats; ++r) {  // run 0 warms up
    Tensor x = example;
    for (std::size_t i = 0; i < model.size(); ++i) {
      const auto start = Clock::now();
      Variable in(x, /*requires_grad=*/true);
      Variable out = model[i]->forward(in);
      out.backward(Tensor::ones(out.data().shape(), out.data().options()));
      x = out.data();
      // Reading one element waits for a GPU's queued kernels (free on the CPU).
      const Tensor& done = in.has_grad() ? in.grad() : out.data();
      (void)done.reshape({-1}).narrow(0, 0, 1).to(Device::cpu()).item();
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (r > 0) runs[i].push_back(seconds);
    }
  }
  model.zero_grad();
  std::vector<double> costs;
  for (auto& v : runs) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    costs.push_back(v[v.size() / 2]);
  }
  return costs;
}

}  // namespace dtrain::dist
