// The per-op trace (tools/trace_ops.py reads it): while recording, every forward op that makes
// a graph node writes an "op forward" event from the previous op's end, and every backward
// node an "op backward" span, each named by the function that wrote the op's gradient; the
// events nest inside the phase spans and follow one another without overlapping. Nothing is
// recorded outside a recording window.
#include "dtrain/autograd/functions.h"
#include "dtrain/core/trace.h"
#include "support/test_support.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace dtrain::test {
namespace {

// One forward + backward of x W -> layer_norm -> sum, in phase spans.
void step(const Variable& x, const Variable& w) {
  Variable loss;
  {
    trace::Span s("forward", trace::Phase::Forward);
    loss = sum(layer_norm(matmul(x, w), 1, Variable(), Variable(), 1e-5));
  }
  trace::Span s("backward", trace::Phase::Backward);
  loss.backward();
}

}  // namespace

TEST_CASE("trace: forward ops and backward nodes are recorded per op, named, inside their phases",
          "[autograd][cpu]") {
  const Variable x(random_tensor({8, 16}, 81), true), w(random_tensor({16, 32}, 82), true);
  trace::stop_recording();
  step(x, w);  // not recorded
  trace::start_recording();
  const auto origin = std::chrono::steady_clock::now();
  step(x, w);
  trace::stop_recording();
  const auto doc = nlohmann::json::parse("[" + trace::chrome_events(0, origin) + "]");

  std::map<std::string, std::vector<std::string>> ops;  // category -> names, in order
  double forward_start = 0, forward_end = 0, previous_end = 0;
  for (const auto& e : doc) {
    if (e.at("ph") != "X") continue;
    const std::string cat = e.at("cat"), name = e.at("name");
    const double ts = e.at("ts"), end = ts + e.at("dur").get<double>();
    if (cat == "forward") {
      forward_start = ts;
      forward_end = end;
    }
    if (cat == "op forward") {
      CHECK(ts >= previous_end - 1e-3);  // one after another (times printed to the nanosecond)
      previous_end = end;
    }
    if (cat == "op forward" || cat == "op backward") ops[cat].push_back(name);
  }
  // Recorded as each finishes: the forward ops before their phase span (which ends after them).
  REQUIRE(ops["op forward"] == std::vector<std::string>{"matmul", "fused_layer_norm", "sum"});
  CHECK(previous_end <= forward_end);
  CHECK(forward_start >= 0);
  REQUIRE(ops["op backward"].size() == 3);
  CHECK(ops["op backward"].front() == "sum");
  CHECK(ops["op backward"].back() == "matmul");
}

}  // namespace dtrain::test
