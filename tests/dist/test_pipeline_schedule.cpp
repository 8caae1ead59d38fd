// Pipeline schedules and cuts, without communicators: every rank's plan is replayed
// together with the others' under the two transports' matching rules.
//  - MPI: sends never wait (the executor issues them before it waits for anything); a
//    pass waits for its receives. Every plan must run to the end.
//  - NCCL: a rank's batches run one after another, and a message completes only when its
//    send and its receive are both in their ranks' current batches; messages between two
//    ranks match in issue order, so the k-th send from p to q must be the k-th receive at q
//    from p. Every plan must run to the end without two ranks waiting on each other.
// Plus what each schedule promises: every forward and backward once, backward after
// forward (and each W once, after its B, where the backward is split), at most K - s
// micro-batches alive on stage s under 1F1B and K under ZB-H1, and the bubbles that
// simulated_bubble gives with equal pass times.
#include "dtrain/dist/pipeline/pipeline_partition.h"
#include "dtrain/dist/pipeline/pipeline_schedule.h"
#include "support/test_support.h"

#include <map>
#include <set>

using namespace dtrain;
using dist::PipelineAction;
using dist::PipelineMessage;
using dist::PipelineSchedule;
using dist::PipelineShape;

namespace {

using Batch = std::vector<PipelineMessage>;
using MessageId = std::tuple<int, int, int>;  // kind, boundary, micro

MessageId id(const PipelineMessage& m) { return {static_cast<int>(m.kind), m.boundary, m.micro}; }

// Each rank's message batches in issue order (empty ones dropped).
std::vector<std::vector<Batch>> batches(PipelineSchedule s, const PipelineShape& shape) {
  std::vector<std::vector<Batch>> out(static_cast<std::size_t>(shape.stages));
  for (int r = 0; r < shape.stages; ++r) {
    const dist::PipelinePlan plan = dist::schedule_plan(s, shape, r);
    for (const auto& step : plan.steps) {
      if (!step.messages.empty()) out[static_cast<std::size_t>(r)].push_back(step.messages);
    }
    if (!plan.tail.empty()) out[static_cast<std::size_t>(r)].push_back(plan.tail);
  }
  return out;
}

// MPI: returns whether every rank reached the end.
bool runs_under_mpi(const std::vector<std::vector<Batch>>& plan) {
  const std::size_t n = plan.size();
  std::vector<std::size_t> at(n, 0);
  std::set<std::tuple<int, int, MessageId>> sent;  // (from, to, id)
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t r = 0; r < n; ++r) {
      while (at[r] < plan[r].size()) {
        const Batch& b = plan[r][at[r]];
        for (const auto& m : b) {
          if (m.send) sent.insert({static_cast<int>(r), m.peer, id(m)});
        }
        bool ready = true;
        for (const auto& m : b) {
          if (!m.send && !sent.count({m.peer, static_cast<int>(r), id(m)})) ready = false;
        }
        if (!ready) break;
        ++at[r];
        progress = true;
      }
    }
  }
  for (std::size_t r = 0; r < n; ++r) {
    if (at[r] != plan[r].size()) return false;
  }
  return true;
}

// NCCL: returns whether every rank reached the end; checks the order of matching.
bool runs_under_nccl(const std::vector<std::vector<Batch>>& plan) {
  const std::size_t n = plan.size();
  // The k-th message from p to q, as the sender and the receiver number it.
  std::map<std::tuple<int, int, int>, MessageId> sends, recvs;
  std::vector<std::vector<std::vector<int>>> order(n);  // [rank][batch][op] -> k
  std::map<std::pair<int, int>, int> count_send, count_recv;
  for (std::size_t r = 0; r < n; ++r) {
    for (const Batch& b : plan[r]) {
      std::vector<int> ks;
      for (const auto& m : b) {
        const int rr = static_cast<int>(r);
        if (m.send) {
          const int k = count_send[{rr, m.peer}]++;
          sends[{rr, m.peer, k}] = id(m);
          ks.push_back(k);
        } else {
          const int k = count_recv[{m.peer, rr}]++;
          recvs[{m.peer, rr, k}] = id(m);
          ks.push_back(k);
        }
      }
      order[r].push_back(ks);
    }
  }
  REQUIRE(sends == recvs);  // every pair of ranks issues its messages in the same order
  std::vector<std::size_t> at(n, 0);
  std::set<std::tuple<int, int, int>> done;  // (from, to, k)
  // Whether message k from `from` to `to` is in `rank`'s current batch.
  auto posted = [&](int rank, int from, int to, int k, bool send) {
    const auto r = static_cast<std::size_t>(rank);
    if (at[r] >= plan[r].size()) return false;
    const Batch& b = plan[r][at[r]];
    for (std::size_t i = 0; i < b.size(); ++i) {
      const int other = b[i].peer;
      if (b[i].send == send && order[r][at[r]][i] == k && (send ? other == to : other == from)) return true;
    }
    return false;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t r = 0; r < n; ++r) {
      if (at[r] >= plan[r].size()) continue;
      const Batch& b = plan[r][at[r]];
      bool all = true;
      for (std::size_t i = 0; i < b.size(); ++i) {
        const int rr = static_cast<int>(r), k = order[r][at[r]][i];
        const auto key = b[i].send ? std::tuple{rr, b[i].peer, k} : std::tuple{b[i].peer, rr, k};
        if (done.count(key)) continue;
        const bool partner =
            b[i].send ? posted(b[i].peer, rr, b[i].peer, k, false) : posted(b[i].peer, b[i].peer, rr, k, true);
        if (partner) done.insert(key);
        else all = false;
      }
      if (all) {
        ++at[r];
        progress = true;
      }
    }
  }
  for (std::size_t r = 0; r < n; ++r) {
    if (at[r] != plan[r].size()) return false;
  }
  return true;
}

struct Case {
  PipelineSchedule schedule;
  PipelineShape shape;
};

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (int k : {1, 2, 3, 4}) {
    for (int m : {1, 2, 3, 4, 8, 16}) {
      out.push_back({PipelineSchedule::GPipe, {k, 1, m}});
      out.push_back({PipelineSchedule::OneFOneB, {k, 1, m}});
      for (int v : {2, 3}) {
        if (k >= 2 && m % k == 0) out.push_back({PipelineSchedule::Interleaved, {k, v, m}});
      }
      out.push_back({PipelineSchedule::ZeroBubbleH1, {k, 1, m}});
      out.push_back({PipelineSchedule::ZeroBubbleV, {k, 2, m}});
    }
  }
  return out;
}

std::string describe(const Case& c) {
  return fmt::format("{} K={} V={} M={}", dist::schedule_name(c.schedule), c.shape.stages, c.shape.virtual_stages,
                     c.shape.micro_batches);
}

}  // namespace

TEST_CASE("Every schedule runs each forward and backward once, backward after forward", "[dist][pipeline]") {
  for (const Case& c : all_cases()) {
    INFO(describe(c));
    const bool split = dist::splits_backward(c.schedule);
    for (int s = 0; s < c.shape.stages; ++s) {
      std::set<std::pair<int, int>> forwards, backwards, weights;
      for (const PipelineAction& a : dist::schedule_actions(c.schedule, c.shape, s)) {
        const std::pair<int, int> key{a.chunk, a.micro};
        if (a.kind == PipelineAction::Kind::Forward) {
          REQUIRE(forwards.insert(key).second);
        } else if (a.kind == PipelineAction::Kind::Backward) {
          REQUIRE(forwards.count(key) == 1);
          REQUIRE(backwards.insert(key).second);
        } else {
          REQUIRE(split);
          REQUIRE(backwards.count(key) == 1);
          REQUIRE(weights.insert(key).second);
        }
      }
      const auto passes = static_cast<std::size_t>(c.shape.micro_batches * c.shape.virtual_stages);
      CHECK(forwards.size() == passes);
      CHECK(backwards.size() == passes);
      CHECK(weights.size() == (split ? passes : 0));
      const auto forward_only = dist::schedule_actions(c.schedule, c.shape, s, /*forward_only=*/true);
      CHECK(forward_only.size() == passes);
    }
  }
}

TEST_CASE("Every schedule's messages complete under MPI's and NCCL's rules", "[dist][pipeline]") {
  for (const Case& c : all_cases()) {
    INFO(describe(c));
    const auto plan = batches(c.schedule, c.shape);
    CHECK(runs_under_mpi(plan));
    CHECK(runs_under_nccl(plan));
  }
}

TEST_CASE("The replays catch a plan that deadlocks", "[dist][pipeline]") {
  // Two ranks that both send before they receive, in separate batches: fine for MPI,
  // a deadlock for NCCL, whose sends wait for their receives.
  using M = PipelineMessage;
  std::vector<std::vector<Batch>> both_send_first{
      {{M{M::Kind::Activation, true, 1, 0, 0}}, {M{M::Kind::Gradient, false, 1, 0, 0}}},
      {{M{M::Kind::Gradient, true, 0, 0, 0}}, {M{M::Kind::Activation, false, 0, 0, 0}}}};
  CHECK(runs_under_mpi(both_send_first));
  CHECK_FALSE(runs_under_nccl(both_send_first));
  // Both receive first: a deadlock everywhere.
  std::vector<std::vector<Batch>> both_receive_first{
      {{M{M::Kind::Gradient, false, 1, 0, 0}}, {M{M::Kind::Activation, true, 1, 0, 0}}},
      {{M{M::Kind::Activation, false, 0, 0, 0}}, {M{M::Kind::Gradient, true, 0, 0, 0}}}};
  CHECK_FALSE(runs_under_mpi(both_receive_first));
  CHECK_FALSE(runs_under_nccl(both_receive_first));
}

TEST_CASE("1F1B keeps at most K - s micro-batches alive on stage s, GPipe all of them", "[dist][pipeline]") {
  for (int k : {2, 4}) {
    for (int m : {1, 4, 8, 16}) {
      for (int s = 0; s < k; ++s) {
        auto peak = [&](PipelineSchedule schedule) {
          int alive = 0, most = 0;
          for (const auto& a : dist::schedule_actions(schedule, {k, 1, m}, s)) {
            alive += a.kind == PipelineAction::Kind::Forward ? 1 : -1;
            most = std::max(most, alive);
          }
          return most;
        };
        INFO("K=" << k << " M=" << m << " stage " << s);
        CHECK(peak(PipelineSchedule::OneFOneB) == std::min(k - s, m));
        CHECK(peak(PipelineSchedule::GPipe) == m);
      }
    }
  }
}

TEST_CASE("ZB-V places chunks s and 2K-1-s on rank s; the interleaved schedule s, s+K, ...", "[dist][pipeline]") {
  const PipelineShape v{4, 2, 8}, interleaved{4, 2, 8};
  CHECK(dist::virtual_stage_of(PipelineSchedule::ZeroBubbleV, v, 1, 0) == 1);
  CHECK(dist::virtual_stage_of(PipelineSchedule::ZeroBubbleV, v, 1, 1) == 6);
  CHECK(dist::virtual_stage_of(PipelineSchedule::Interleaved, interleaved, 1, 1) == 5);
  for (int c = 0; c < 8; ++c) {
    const int s = dist::stage_of(PipelineSchedule::ZeroBubbleV, v, c);
    CHECK((dist::virtual_stage_of(PipelineSchedule::ZeroBubbleV, v, s, 0) == c ||
           dist::virtual_stage_of(PipelineSchedule::ZeroBubbleV, v, s, 1) == c));
  }
  // The turn of the V (virtual stages 3 and 4, both on rank 3) sends nothing.
  for (int s = 0; s < 4; ++s) {
    const dist::PipelinePlan plan = dist::schedule_plan(PipelineSchedule::ZeroBubbleV, v, s);
    for (const auto& step : plan.steps) {
      for (const PipelineMessage& m : step.messages) CHECK(m.peer != s);
    }
  }
}

TEST_CASE("The zero-bubble schedules keep 1F1B's peak activations", "[dist][pipeline]") {
  // Alive: forward run, W not yet (W needs the saved activations).
  auto peak = [](PipelineSchedule schedule, const PipelineShape& shape, int s) {
    int alive = 0, most = 0;
    for (const auto& a : dist::schedule_actions(schedule, shape, s)) {
      if (a.kind == PipelineAction::Kind::Forward) ++alive;
      if (a.kind == PipelineAction::Kind::Weight) --alive;
      most = std::max(most, alive);
    }
    return most;
  };
  for (int k : {2, 4}) {
    for (int m : {1, 4, 8, 16}) {
      INFO("K=" << k << " M=" << m);
      int h1 = 0, v = 0;
      for (int s = 0; s < k; ++s) {
        h1 = std::max(h1, peak(PipelineSchedule::ZeroBubbleH1, {k, 1, m}, s));
        v = std::max(v, peak(PipelineSchedule::ZeroBubbleV, {k, 2, m}, s));
      }
      CHECK(h1 == std::min(k, m));  // whole-stage micro-batches, as 1F1B's stage 0
      CHECK(v <= 2 * k);            // half-size chunks: the same bytes
    }
  }
}

TEST_CASE("Simulated bubbles with equal pass times match each schedule's theory", "[dist][pipeline]") {
  const std::vector<dist::PassTimes> equal{{1, 1, 1}};
  for (int k : {1, 2, 4}) {
    for (int m : {1, 4, 8}) {
      INFO("K=" << k << " M=" << m);
      CHECK(dist::simulated_bubble(PipelineSchedule::OneFOneB, {k, 1, m}, equal) ==
            Approx(dist::theoretical_bubble({k, 1, m})));
      CHECK(dist::simulated_bubble(PipelineSchedule::GPipe, {k, 1, m}, equal) ==
            Approx(dist::theoretical_bubble({k, 1, m})));
      // ZB-H1: (K-1)(F+B-W) of idle time per stage, a third of 1F1B's (K-1)(F+B+W), once
      // there are as many micro-batches as stages.
      if (m >= k)
        CHECK(dist::simulated_bubble(PipelineSchedule::ZeroBubbleH1, {k, 1, m}, equal) ==
              Approx((k - 1.0) / (3.0 * m + k - 1)));
    }
  }
  // ZB-V's figures from its header comment.
  CHECK(dist::simulated_bubble(PipelineSchedule::ZeroBubbleV, {4, 2, 8}, equal) == Approx(3.0 / 51).margin(1e-9));
  CHECK(dist::simulated_bubble(PipelineSchedule::ZeroBubbleV, {2, 2, 8}, equal) == Approx(1.0 / 49).margin(1e-9));
  // Measured times: a W half as long as F leaves more of the bubble.
  CHECK(dist::simulated_bubble(PipelineSchedule::ZeroBubbleH1, {2, 1, 8}, {{2, 2, 1}}) >
        dist::simulated_bubble(PipelineSchedule::ZeroBubbleH1, {2, 1, 8}, {{1, 1, 1}}));
}

TEST_CASE("Simulated bubbles take pass times per rank or per virtual stage", "[dist][pipeline]") {
  const dist::PipelineShape zbv{2, 2, 8};
  // Per virtual stage with every chunk alike: the same as one entry for all.
  CHECK(dist::simulated_bubble(PipelineSchedule::ZeroBubbleV, zbv, std::vector<dist::PassTimes>(4, {1, 1, 1})) ==
        Approx(dist::simulated_bubble(PipelineSchedule::ZeroBubbleV, zbv, {{1, 1, 1}})));
  // ZB-V puts virtual stages 0 and 3 on rank 0, 1 and 2 on rank 1. Chunks of unequal work
  // whose sums per rank are equal: per rank the averages hide the difference, per virtual
  // stage the simulation sees the first chunk's passes run ahead of the second's.
  const std::vector<dist::PassTimes> per_chunk{{0.5, 0.5, 0.5}, {1.5, 1.5, 1.5}, {0.5, 0.5, 0.5}, {1.5, 1.5, 1.5}};
  CHECK(dist::simulated_bubble(PipelineSchedule::ZeroBubbleV, zbv, per_chunk) >
        dist::simulated_bubble(PipelineSchedule::ZeroBubbleV, zbv, {{1, 1, 1}, {1, 1, 1}}) + 0.01);
  CHECK_THROWS_WITH(dist::simulated_bubble(PipelineSchedule::ZeroBubbleV, zbv, std::vector<dist::PassTimes>(3)),
                    Catch::Matchers::Contains("pass times for 3 stages, expected 1, 2 (per rank) or 4 (per virtual "
                                              "stage)"));
}

TEST_CASE("Schedules refuse shapes they cannot run", "[dist][pipeline]") {
  CHECK_THROWS_WITH(dist::check_schedule(PipelineSchedule::Interleaved, {2, 1, 4}),
                    Catch::Contains(">= 2 virtual stages"));
  CHECK_THROWS_WITH(dist::check_schedule(PipelineSchedule::Interleaved, {1, 2, 4}), Catch::Contains(">= 2 stages"));
  CHECK_THROWS_WITH(dist::check_schedule(PipelineSchedule::Interleaved, {4, 2, 6}),
                    Catch::Contains("multiple of the stages"));
  CHECK_THROWS_WITH(dist::check_schedule(PipelineSchedule::GPipe, {2, 2, 4}), Catch::Contains("virtual stages 1"));
  CHECK_THROWS_WITH(dist::check_schedule(PipelineSchedule::OneFOneB, {2, 1, 0}), Catch::Contains("micro-batches"));
  CHECK_THROWS_WITH(dist::parse_schedule("pipedream"), Catch::Contains("gpipe, 1f1b, interleaved, zb-h1 or zb-v"));
  CHECK(dist::parse_schedule("zb-v") == PipelineSchedule::ZeroBubbleV);
  CHECK_THROWS_WITH(dist::check_schedule(PipelineSchedule::ZeroBubbleV, {2, 1, 4}), Catch::Contains("two chunks"));
  CHECK_THROWS_WITH(dist::check_schedule(PipelineSchedule::ZeroBubbleH1, {2, 2, 4}), Catch::Contains("one chunk"));
  CHECK(dist::parse_schedule("1f1b") == PipelineSchedule::OneFOneB);
}

TEST_CASE("The theoretical bubble is (K-1)/(V(M+K-1))", "[dist][pipeline]") {
  CHECK(dist::theoretical_bubble({2, 1, 8}) == Approx(1.0 / 9));
  CHECK(dist::theoretical_bubble({4, 1, 4}) == Approx(3.0 / 7));
  CHECK(dist::theoretical_bubble({4, 2, 4}) == Approx(3.0 / 14));
  CHECK(dist::theoretical_bubble({1, 1, 4}) == 0);
}

TEST_CASE("Balanced cuts minimize the costliest part and keep free layers with the one before", "[dist][pipeline]") {
  CHECK(dist::balanced_cuts({1, 1, 1, 1}, 2) == std::vector<int>{2});
  CHECK(dist::balanced_cuts({4, 1, 1, 1, 1}, 2) == std::vector<int>{1});
  // A ReLU (cost 0) after each Linear stays with it.
  CHECK(dist::balanced_cuts({0, 5, 0, 5, 0, 5, 0, 5, 0, 1}, 2) == std::vector<int>{5});
  CHECK(dist::balanced_cuts({3, 3, 3}, 3) == std::vector<int>{1, 2});
  // Rather a part with something to train than one of free layers alone: [2][1][1, 0],
  // not [2][1, 1][0].
  CHECK(dist::balanced_cuts({2, 1, 1, 0}, 3) == std::vector<int>{1, 2});
  CHECK(dist::balanced_cuts({7}, 1).empty());
  CHECK_THROWS_WITH(dist::balanced_cuts({1, 1}, 3), Catch::Contains("3 parts") && Catch::Contains("only 2 layers"));
  CHECK_THROWS_WITH(dist::check_cuts({2, 2}, 5, 3), Catch::Contains("cut point 1 (2)"));
  CHECK_THROWS_WITH(dist::check_cuts({2}, 5, 3), Catch::Contains("3 parts need 2"));
  CHECK_THROWS_WITH(dist::check_cuts({5}, 5, 2), Catch::Contains("before the layer count"));
  CHECK_NOTHROW(dist::check_cuts({1, 4}, 5, 3));
}

TEST_CASE("Balancing by time gives a recomputing stage fewer layers", "[dist][pipeline]") {
  // Six layers, forward 1 and backward 1 each: a recomputing part pays 3 a layer, not 2.
  const std::vector<dist::LayerCost> even(6, {1, 1});
  CHECK(dist::balanced_cuts(even, {false, false}) == std::vector<int>{3});
  CHECK(dist::balanced_cuts(even, {true, false}) == std::vector<int>{2});  // 6 and 8, not 9 and 6
  CHECK(dist::balanced_cuts(even, {false, true}) == std::vector<int>{4});
  // Without recomputation, the forward + backward sums balance as balanced_cuts(costs) does.
  const std::vector<dist::LayerCost> mixed{{1, 2}, {0, 0}, {2, 4}, {1, 1}};
  CHECK(dist::balanced_cuts(mixed, {false, false}) == dist::balanced_cuts({3, 0, 6, 2}, 2));
}
