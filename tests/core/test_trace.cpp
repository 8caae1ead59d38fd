#include "dtrain/core/trace.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <set>
#include <string>
#include <thread>

using namespace dtrain;
using namespace std::chrono_literals;

namespace {

void busy(std::chrono::microseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

}  // namespace

TEST_CASE("trace: phased spans add their exclusive time to the thread's totals", "[core][cpu]") {
  // A fresh thread: totals are per thread. Only lower bounds and sums are checked, so that
  // a busy machine (which stretches every span) cannot fail the test.
  std::thread([] {
    const auto start = std::chrono::steady_clock::now();
    {
      trace::Span outer("backward", trace::Phase::Backward);
      busy(3ms);
      {
        trace::Span inner("wait", trace::Phase::Communication);
        busy(5ms);
      }
      trace::Span untimed("all_reduce", "communication", 64);  // traced only: not in any phase
      busy(1ms);
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const trace::PhaseTotals t = trace::thread_totals();
    CHECK(t[trace::Phase::Communication] >= 0.005);
    CHECK(t[trace::Phase::Backward] >= 0.004);  // 3 + 1 ms of its own
    // Exclusive: the nested 5 ms count once, as communication, not as backward too.
    CHECK(t[trace::Phase::Backward] + t[trace::Phase::Communication] <= elapsed);
    CHECK(t.compute() == t[trace::Phase::Backward]);
    CHECK(t[trace::Phase::Data] == 0);
    const trace::PhaseTotals d = trace::thread_totals() - t;
    CHECK(d[trace::Phase::Backward] == 0);
  }).join();
}

TEST_CASE("trace: events are kept only while recording, as Chrome trace-event JSON", "[core][cpu]") {
  trace::stop_recording();
  { trace::Span before("not recorded", trace::Phase::Forward); }
  trace::start_recording();
  trace::name_thread("training \"main\"");
  const auto origin = std::chrono::steady_clock::now();
  { trace::Span s("forward", trace::Phase::Forward); }
  trace::instant("bucket 0 ready", "communication");
  std::thread([] {
    trace::name_thread("communication thread");
    trace::Span s("all_reduce", "communication", 4096);
  }).join();
  trace::stop_recording();
  { trace::Span after("not recorded either", trace::Phase::Forward); }

  const std::string events = trace::chrome_events(3, origin);
  const auto doc = nlohmann::json::parse(trace::chrome_document({"", "", "", events}, "rank"));
  const auto& list = doc.at("traceEvents");
  int spans = 0, instants = 0, process_names = 0;
  std::set<std::string> names;
  for (const auto& e : list) {
    CHECK(e.at("pid") == 3);
    names.insert(e.at("name").get<std::string>());
    if (e.at("ph") == "X") {
      ++spans;
      CHECK(e.at("ts").get<double>() >= 0);
      CHECK(e.at("dur").get<double>() >= 0);
    }
    if (e.at("ph") == "i") ++instants;
    if (e.at("name") == "process_name") {
      ++process_names;
      CHECK(e.at("args").at("name") == "rank 3");
    }
    if (e.at("name") == "all_reduce") CHECK(e.at("args").at("bytes") == 4096);
    if (e.at("name") == "thread_name" && e.at("tid") == list.back().at("tid")) {
      CHECK(e.at("args").at("name") == "communication thread");  // the last event is the other thread's span
    }
  }
  CHECK(spans == 2);
  CHECK(instants == 1);
  CHECK(process_names == 1);
  CHECK(names.count("training \"main\"") == 0);  // a thread name is an argument, escaped in the JSON
  CHECK(names.count("not recorded") == 0);
  CHECK(names.count("not recorded either") == 0);

  trace::start_recording();  // a new window starts empty
  trace::stop_recording();
  CHECK(trace::chrome_events(0, origin).empty());
}
