#include "dist/pipeline/zero_bubble_order.h"

#include "dtrain/core/error.h"

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <optional>
#include <tuple>

namespace dtrain::dist {

using Kind = PipelineAction::Kind;

std::vector<PipelineAction> zb_h1_order(const PipelineShape& shape, int stage) {
  const int K = shape.stages, M = shape.micro_batches;
  // 1F1B's warm-up; then stage s holds back its first s W passes, which later fill the
  // idle time that 1F1B leaves while the last backwards come down the pipeline.
  const int warmup = std::min(K - stage - 1, M);
  std::vector<PipelineAction> out;
  int weights = 0;
  for (int k = 0; k < warmup; ++k) out.push_back({Kind::Forward, 0, k});
  for (int k = 0; k + warmup < M; ++k) {
    out.push_back({Kind::Forward, 0, k + warmup});
    out.push_back({Kind::Backward, 0, k});
    if (k >= stage) out.push_back({Kind::Weight, 0, weights++});
  }
  for (int k = M - warmup; k < M; ++k) {
    out.push_back({Kind::Backward, 0, k});
    out.push_back({Kind::Weight, 0, weights++});
  }
  while (weights < M) out.push_back({Kind::Weight, 0, weights++});
  return out;
}

std::vector<std::vector<PipelineAction>> zb_v_orders(const PipelineShape& shape, bool forward_only) {
  const int K = shape.stages, M = shape.micro_batches, last = 2 * K - 1;
  const auto k_size = static_cast<std::size_t>(K);
  // Rank s's chunk 0 is virtual stage s, its chunk 1 virtual stage 2K-1-s.
  auto virtual_stage = [&](int s, int chunk) { return chunk == 0 ? s : last - s; };
  using PassId = std::tuple<int, int, int>;  // kind, virtual stage, micro
  std::map<PassId, int> ended;               // the tick at whose start each pass has ended
  auto done_by = [&](const PassId& id, int tick) {
    auto it = ended.find(id);
    return it != ended.end() && it->second <= tick;
  };
  std::vector<std::vector<PipelineAction>> orders(k_size);
  std::vector<std::array<int, 2>> next_forward(k_size, {0, 0}), next_backward(k_size, {0, 0});
  std::vector<std::deque<PipelineAction>> weights_due(k_size);  // B done, W not yet
  std::vector<int> alive(k_size, 0);                            // chunk activations held: forward run, W not yet
  // 1F1B's peak on stage 0 (K micro-batches of a whole stage), in half-size chunks.
  const int most_alive = forward_only ? 2 * M : 2 * K;
  const std::size_t passes = static_cast<std::size_t>(forward_only ? 2 * M : 6 * M);
  auto ready = [&](int s, Kind kind, int chunk, int tick) -> std::optional<PipelineAction> {
    const auto r = static_cast<std::size_t>(s);
    const int c = virtual_stage(s, chunk);
    if (kind == Kind::Forward) {
      const int m = next_forward[r][static_cast<std::size_t>(chunk)];
      if (m >= M || alive[r] >= most_alive) return std::nullopt;
      if (c > 0 && !done_by({static_cast<int>(Kind::Forward), c - 1, m}, tick)) return std::nullopt;
      return PipelineAction{kind, chunk, m};
    }
    const int m = next_backward[r][static_cast<std::size_t>(chunk)];
    if (m >= M || !done_by({static_cast<int>(Kind::Forward), c, m}, tick)) return std::nullopt;
    if (c < last && !done_by({static_cast<int>(Kind::Backward), c + 1, m}, tick)) return std::nullopt;
    return PipelineAction{kind, chunk, m};
  };
  for (int tick = 0;; ++tick) {
    bool finished = true;
    for (const auto& o : orders) finished = finished && o.size() == passes;
    if (finished) break;
    DTRAIN_CHECK(tick <= 8 * static_cast<int>(passes) * K, "pipeline schedule zb-v: no order found for K={} M={}", K,
                 M);
    std::vector<std::optional<PipelineAction>> picks(k_size);
    for (int s = 0; s < K; ++s) {
      const auto r = static_cast<std::size_t>(s);
      std::optional<PipelineAction> pick;
      if (!forward_only) pick = ready(s, Kind::Backward, 0, tick);
      if (!pick && !forward_only) pick = ready(s, Kind::Backward, 1, tick);
      if (!pick) pick = ready(s, Kind::Forward, 1, tick);
      if (!pick) pick = ready(s, Kind::Forward, 0, tick);
      if (!pick && !weights_due[r].empty()) pick = weights_due[r].front();
      picks[r] = pick;
    }
    // The picks of one tick all see the state before it.
    for (int s = 0; s < K; ++s) {
      const auto r = static_cast<std::size_t>(s);
      if (!picks[r]) continue;
      const PipelineAction a = *picks[r];
      orders[r].push_back(a);
      ended[{static_cast<int>(a.kind), virtual_stage(s, a.chunk), a.micro}] = tick + 1;
      const auto chunk = static_cast<std::size_t>(a.chunk);
      if (a.kind == Kind::Forward) {
        ++next_forward[r][chunk];
        ++alive[r];
      } else if (a.kind == Kind::Backward) {
        ++next_backward[r][chunk];
        weights_due[r].push_back({Kind::Weight, a.chunk, a.micro});
      } else {
        weights_due[r].pop_front();
        --alive[r];
      }
    }
  }
  return orders;
}

}  // namespace dtrain::dist
