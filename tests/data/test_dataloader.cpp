#include "data/idx_files.h"
#include "dtrain/data/dataloader.h"
#include "dtrain/data/mnist.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <thread>

using namespace dtrain;
using namespace dtrain::data;
using dtrain::test::require_error;

namespace {

// Example i: input f32 (2) = {i, -i}, target i64 scalar i. Optionally throws for one index,
// or sleeps a little (index-dependent) so that several workers finish out of order.
class IndexDataset final : public Dataset {
 public:
  explicit IndexDataset(std::int64_t n, std::int64_t throw_at = -1, bool jitter = false)
      : n_(n), throw_at_(throw_at), jitter_(jitter) {}
  std::int64_t size() const override { return n_; }
  Example get(std::int64_t i) const override {
    ++calls;
    DTRAIN_CHECK(i != throw_at_, "bad example {}", i);
    if (jitter_) std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 5 * 300));
    Example ex{Tensor::empty({2}), Tensor::empty({}, {DType::i64})};
    ex.input.data<float>()[0] = static_cast<float>(i);
    ex.input.data<float>()[1] = -static_cast<float>(i);
    *ex.target.data<std::int64_t>() = i;
    // Counts this thread among the live callers until it exits, which comes before a
    // join() of it returns.
    struct Registration {
      std::shared_ptr<std::atomic<int>> live;
      ~Registration() {
        if (live) --*live;
      }
    };
    thread_local Registration registration;
    if (!registration.live) {
      registration.live = live_callers;
      ++*live_callers;
    }
    return ex;
  }
  mutable std::atomic<std::int64_t> calls{0};
  // Threads that have called get() and not exited yet (a thread counts for the first
  // IndexDataset it calls only).
  const std::shared_ptr<std::atomic<int>> live_callers = std::make_shared<std::atomic<int>>(0);

 private:
  std::int64_t n_, throw_at_;
  bool jitter_;
};

// The targets of one full pass, batch by batch, checking each batch's inputs against them.
std::vector<std::vector<std::int64_t>> run_epoch(DataLoader& loader) {
  std::vector<std::vector<std::int64_t>> batches;
  for (Batch& batch : loader) {
    auto targets = batch.targets.to_vector<std::int64_t>();
    auto inputs = batch.inputs.to_vector<float>();
    REQUIRE(batch.inputs.shape() == Shape{static_cast<std::int64_t>(targets.size()), 2});
    for (std::size_t r = 0; r < targets.size(); ++r) {
      REQUIRE(inputs[2 * r] == static_cast<float>(targets[r]));
      REQUIRE(inputs[2 * r + 1] == -static_cast<float>(targets[r]));
    }
    batches.push_back(std::move(targets));
  }
  return batches;
}

std::vector<std::int64_t> flatten(const std::vector<std::vector<std::int64_t>>& batches) {
  std::vector<std::int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

std::vector<std::int64_t> iota_vector(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), std::int64_t{0});
  return v;
}

// Fixed order, with repeats: a sampler need not be a permutation.
class ListSampler final : public Sampler {
 public:
  ListSampler(std::vector<std::int64_t> order, std::int64_t claimed_size)
      : order_(std::move(order)), size_(claimed_size) {}
  std::vector<std::int64_t> indices(std::int64_t) const override { return order_; }
  std::int64_t size() const override { return size_; }

 private:
  std::vector<std::int64_t> order_;
  std::int64_t size_;
};

}  // namespace

TEST_CASE("DataLoader batches a sequential epoch and keeps the partial last batch", "[cpu][data]") {
  DataLoader loader(std::make_shared<IndexDataset>(10), {.batch_size = 4});
  CHECK(loader.num_batches() == 3);
  auto batches = run_epoch(loader);
  REQUIRE(batches.size() == 3);
  CHECK(batches[0] == std::vector<std::int64_t>{0, 1, 2, 3});
  CHECK(batches[2] == std::vector<std::int64_t>{8, 9});
  CHECK(flatten(batches) == iota_vector(10));
  CHECK(run_epoch(loader) == batches);  // a second pass starts over
}

TEST_CASE("DataLoader drop_last drops only an incomplete last batch", "[cpu][data]") {
  DataLoader loader(std::make_shared<IndexDataset>(10), {.batch_size = 4, .drop_last = true});
  CHECK(loader.num_batches() == 2);
  CHECK(flatten(run_epoch(loader)) == iota_vector(8));
  DataLoader exact(std::make_shared<IndexDataset>(8), {.batch_size = 4, .drop_last = true});
  CHECK(run_epoch(exact).size() == 2);
  DataLoader empty(std::make_shared<IndexDataset>(0), {});
  CHECK(empty.num_batches() == 0);
  CHECK(empty.begin() == empty.end());
}

TEST_CASE("DataLoader shuffles per epoch in the sampler's order", "[cpu][data]") {
  const std::int64_t n = 50;
  DataLoader loader(std::make_shared<IndexDataset>(n), {.batch_size = 8, .shuffle = true, .seed = 9});
  auto epoch0 = flatten(run_epoch(loader));
  CHECK(epoch0 == RandomSampler(n, 9).indices(0));
  auto sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == iota_vector(n));  // every index exactly once
  loader.set_epoch(1);
  auto epoch1 = flatten(run_epoch(loader));
  CHECK(epoch1 == RandomSampler(n, 9).indices(1));
  CHECK(epoch1 != epoch0);
  loader.set_epoch(0);
  CHECK(flatten(run_epoch(loader)) == epoch0);
  DataLoader again(std::make_shared<IndexDataset>(n), {.batch_size = 5, .shuffle = true, .seed = 9});
  CHECK(flatten(run_epoch(again)) == epoch0);
  require_error([&] { loader.set_epoch(-1); }, {"set_epoch", "-1"});
}

TEST_CASE("DataLoader follows an explicit sampler", "[cpu][data]") {
  auto ds = std::make_shared<IndexDataset>(10);
  const std::vector<std::int64_t> order = {7, 7, 2, 9, 0};
  DataLoader loader(ds, {.batch_size = 2}, std::make_shared<ListSampler>(order, 5));
  CHECK(loader.num_batches() == 3);
  CHECK(flatten(run_epoch(loader)) == order);
  DataLoader liar(ds, {.batch_size = 2}, std::make_shared<ListSampler>(order, 6));
  require_error([&] { liar.begin(); }, {"returned 5 indices for epoch 0", "size() is 6"});
}

TEST_CASE("DataLoader validates its options", "[cpu][data]") {
  auto ds = std::make_shared<IndexDataset>(4);
  require_error([&] { DataLoader(nullptr, {}); }, {"dataset is null"});
  require_error([&] { DataLoader(ds, {.batch_size = 0}); }, {"batch_size", "0"});
  require_error([&] { DataLoader(ds, {.prefetch_batches = 0}); }, {"prefetch_batches"});
  require_error([&] { DataLoader(ds, {.workers = 0}); }, {"workers"});
  require_error([&] { DataLoader(ds, {.shuffle = true}, std::make_shared<SequentialSampler>(4)); },
                {"shuffle", "sampler"});
}

TEST_CASE("DataLoader keeps sampler order with several workers", "[cpu][data]") {
  const std::int64_t n = 90;
  auto ds = std::make_shared<IndexDataset>(n, -1, /*jitter=*/true);
  for (int workers : {2, 4}) {
    for (int prefetch : {1, 3}) {
      INFO("workers " << workers << " prefetch " << prefetch);
      DataLoader loader(
          ds, {.batch_size = 3, .shuffle = true, .seed = 5, .prefetch_batches = prefetch, .workers = workers});
      auto batches = run_epoch(loader);
      CHECK(batches.size() == 30);
      CHECK(flatten(batches) == RandomSampler(n, 5).indices(0));
    }
  }
}

TEST_CASE("DataLoader rethrows a worker's error when the consumer reaches that batch", "[cpu][data]") {
  DataLoader loader(std::make_shared<IndexDataset>(40, /*throw_at=*/13), {.batch_size = 4, .workers = 2});
  auto it = loader.begin();
  std::vector<std::int64_t> seen;
  for (int b = 0; b < 3; ++b, ++it) {
    auto t = it->targets.to_vector<std::int64_t>();
    seen.insert(seen.end(), t.begin(), t.end());
  }
  CHECK(seen == iota_vector(12));  // the batches before the failing one arrive intact
  require_error([&] { *it; }, {"bad example 13"});
  require_error([&] { ++it; }, {"bad example 13"});  // the pass stays failed

  // Skipping the failing batch without looking at it still reports the error.
  auto skip = loader.begin();
  auto skip_ten = [&] {
    for (int b = 0; b < 10; ++b) ++skip;
  };
  require_error(skip_ten, {"bad example 13"});
}

TEST_CASE("DataLoader stops its threads when the loop ends early", "[cpu][data]") {
  auto ds = std::make_shared<IndexDataset>(1000);
  DataLoader loader(ds, {.batch_size = 1, .prefetch_batches = 2, .workers = 2});
  int seen = 0;
  for (Batch& batch : loader) {
    (void)batch;
    CHECK(*ds->live_callers >= 1);  // the worker that built this batch
    if (++seen == 2) break;
  }
  // Leaving the loop destroyed its iterator, the pass's only owner (the loader keeps a weak
  // reference), and the pass joins its workers: they are gone, not still filling slots, so
  // the count of calls is final.
  CHECK(*ds->live_callers == 0);
  // Two batches consumed, at most max(prefetch, workers) = 2 more built ahead.
  CHECK(ds->calls.load() <= 4);
}

TEST_CASE("DataLoader::begin replaces an unfinished pass", "[cpu][data]") {
  DataLoader loader(std::make_shared<IndexDataset>(20), {.batch_size = 4, .workers = 2});
  auto first = loader.begin();
  CHECK(first->targets.to_vector<std::int64_t>()[0] == 0);
  ++first;
  auto second = loader.begin();
  require_error([&] { *first; }, {"replaced by a later begin()"});
  std::vector<std::int64_t> all;
  for (; second != loader.end(); ++second) {
    auto t = second->targets.to_vector<std::int64_t>();
    all.insert(all.end(), t.begin(), t.end());
  }
  CHECK(all == iota_vector(20));
  require_error([&] { *second; }, {"end iterator"});
}

TEST_CASE("DataLoader iterators outlive their loader", "[cpu][data]") {
  std::optional<DataLoader> loader(std::in_place, std::make_shared<IndexDataset>(12),
                                   DataLoaderOptions{.batch_size = 5});
  auto it = loader->begin();
  loader.reset();
  std::vector<std::int64_t> all;
  for (; it != DataLoader::Iterator(); ++it) {
    auto t = it->targets.to_vector<std::int64_t>();
    all.insert(all.end(), t.begin(), t.end());
  }
  CHECK(all == iota_vector(12));
}

TEST_CASE("DataLoader feeds MNIST batches in sampler order", "[cpu][data]") {
  dtrain::test::TempDir dir;
  const std::uint32_t n = 11;
  std::vector<std::uint8_t> pixels(n * 2 * 2), labels(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    labels[i] = static_cast<std::uint8_t>(i % 10);
    for (int k = 0; k < 4; ++k) pixels[i * 4 + static_cast<std::uint32_t>(k)] = static_cast<std::uint8_t>(20 * i + k);
  }
  dtrain::test::write_file(dir / "train-images-idx3-ubyte", dtrain::test::idx_images(n, 2, 2, pixels));
  dtrain::test::write_file(dir / "train-labels-idx1-ubyte", dtrain::test::idx_labels(labels));
  auto ds = MnistDataset::load(dir.path(), MnistDataset::Split::Train, {.mean = 0.f, .std = 1.f});
  DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .seed = 3, .workers = 2});
  auto order = RandomSampler(n, 3).indices(0);
  std::size_t pos = 0;
  for (Batch& batch : loader) {
    REQUIRE(batch.inputs.dim() == 4);
    auto x = batch.inputs.to_vector<float>();
    auto y = batch.targets.to_vector<std::int64_t>();
    for (std::size_t r = 0; r < y.size(); ++r, ++pos) {
      const auto i = static_cast<std::uint32_t>(order[pos]);
      CHECK(y[r] == labels[i]);
      CHECK(x[r * 4 + 3] == Approx((20.0 * i + 3) / 255.0));
    }
  }
  CHECK(pos == n);
}

// A claimed pass: batches in the order the claim names them, prefetched no further ahead
// than the window, one claim at a time, ending at the first nullopt.
TEST_CASE("DataLoader::begin_claimed delivers the claimed batches in claim order", "[cpu][data]") {
  for (int workers : {1, 3}) {
    INFO(workers << " worker(s)");
    auto dataset = std::make_shared<IndexDataset>(20, -1, /*jitter=*/true);
    DataLoader loader(dataset, {.batch_size = 4, .prefetch_batches = 2, .workers = workers});
    const std::vector<std::int64_t> order{3, 0, 4, 1};  // of the 5 batches; batch 2 goes to "another rank"
    const std::size_t window = static_cast<std::size_t>(std::max(2, workers));
    // Claims made and batches the consumer has taken, under one lock, so that each claim
    // sees how far the consumer is: position k may be claimed only while k < taken + window.
    // (The consumer counts a batch before taking it, so a claim the window allows is never
    // counted as beyond it.)
    std::mutex mu;
    std::condition_variable claimed;
    std::size_t next = 0, taken = 0;
    std::vector<std::size_t> beyond_window;  // positions claimed too early
    std::atomic<int> in_claim{0}, overlapped{0};
    auto claim = [&]() -> std::optional<std::int64_t> {
      if (in_claim.fetch_add(1) != 0) ++overlapped;
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // widens an overlap, if any
      std::size_t k = 0;
      {
        std::lock_guard lock(mu);
        k = next++;
        if (k >= taken + window) beyond_window.push_back(k);
      }
      claimed.notify_all();
      --in_claim;
      if (k >= order.size()) return std::nullopt;
      return order[k];
    };
    std::vector<std::int64_t> numbers, firsts;
    auto it = loader.begin_claimed(claim);
    {
      // Before the consumer takes anything the workers fill the window: wait for that, and
      // then for a claim beyond it, which returns at once if one comes (up to 20 ms: a
      // worker that would overstep does so right after building its last batch).
      std::unique_lock lock(mu);
      CHECK(claimed.wait_for(lock, std::chrono::seconds(30), [&] { return next >= window; }));
      CHECK_FALSE(claimed.wait_for(lock, std::chrono::milliseconds(20), [&] { return next > window; }));
    }
    for (; it != loader.end(); ++it) {
      {
        std::lock_guard lock(mu);
        ++taken;
      }
      numbers.push_back(it.batch_number());
      firsts.push_back(it->targets.to_vector<std::int64_t>().front());
    }
    CHECK(numbers == order);
    CHECK(firsts == std::vector<std::int64_t>{12, 0, 16, 4});
    CHECK(beyond_window.empty());
    CHECK(overlapped.load() == 0);
  }
}

TEST_CASE("DataLoader::begin_claimed rethrows a claim's error at its batch and refuses bad numbers", "[cpu][data]") {
  auto dataset = std::make_shared<IndexDataset>(8);
  DataLoader loader(dataset, {.batch_size = 2, .workers = 2});
  int calls = 0;
  auto it = loader.begin_claimed([&]() -> std::optional<std::int64_t> {
    if (++calls == 2) throw std::runtime_error("server 0 is gone");
    return 1;
  });
  CHECK(it.batch_number() == 1);
  ++it;
  CHECK_THROWS_WITH(*it, Catch::Contains("server 0 is gone"));

  auto bad = loader.begin_claimed([]() -> std::optional<std::int64_t> { return 4; });  // 4 batches: 0-3
  CHECK_THROWS_WITH(*bad, Catch::Contains("the claim returned batch 4, outside the epoch's 4 batches"));
  auto none = loader.begin_claimed([]() -> std::optional<std::int64_t> { return std::nullopt; });
  CHECK(none == loader.end());
  CHECK_THROWS_WITH(loader.begin_claimed(nullptr), Catch::Contains("no claim function"));
}
