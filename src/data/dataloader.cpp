#include "dtrain/data/dataloader.h"

#include "dtrain/core/error.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace dtrain::data {

static_assert(std::input_iterator<DataLoader::Iterator>);

// One pass over an epoch. The batch at position p of the pass is claimed by one worker (in
// increasing p), built, and parked in slots_[p % window]; the consumer takes position pos_
// from its slot. A worker may claim p only while p < taken_ + window, so at most `window`
// batches exist ahead of the one the consumer holds, and a slot is always empty when its
// next batch arrives. Position p is batch p of the epoch, except in a claimed pass, where
// claim_() names the batch (one call at a time, in position order) and the first nullopt
// marks the end.
class DataLoader::Pass {
 public:
  Pass(std::shared_ptr<const Dataset> dataset, std::vector<std::int64_t> indices, std::int64_t epoch,
       std::int64_t batch_size, std::int64_t num_batches, std::int64_t first, int window, int workers,
       bool pin_memory, std::shared_ptr<std::atomic<std::int64_t>> waited_ns, BatchClaim claim = {})
      : dataset_(std::move(dataset)),
        waited_ns_(std::move(waited_ns)),
        indices_(std::move(indices)),
        epoch_(epoch),
        batch_size_(batch_size),
        pin_memory_(pin_memory),
        num_batches_(num_batches),
        claim_(std::move(claim)),
        end_(claim_ ? std::numeric_limits<std::int64_t>::max() : num_batches),
        slots_(static_cast<std::size_t>(window)),
        next_claim_(first),
        taken_(first),
        pos_(first) {
    const auto threads = claim_ ? workers : std::min<std::int64_t>(workers, num_batches_ - first);
    try {
      for (std::int64_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
    } catch (...) {
      shutdown();
      throw;
    }
  }
  ~Pass() { shutdown(); }
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;

  // Whether the consumer is past the last batch. A claimed pass learns where it ends only
  // when a claim says so: this waits until position pos_ holds a batch or is the end.
  bool done() {
    if (!claim_ || has_current_) return pos_ >= end_;
    std::unique_lock lock(mu_);
    wait_for_slot(lock);
    return pos_ >= end_;
  }

  Batch& current() {
    check_usable("dereference");
    if (!has_current_) take();
    return current_;
  }

  std::int64_t current_number() {
    current();
    return current_number_;
  }

  void advance() {
    check_usable("increment");
    if (!has_current_) take();  // a skipped batch still frees its slot (and reports its error)
    current_ = Batch{};
    has_current_ = false;
    if (++pos_ == end_ && !claim_) shutdown();  // a claimed pass's workers stop at its end
  }

  // Called by DataLoader::begin() on the pass it replaces.
  void supersede() {
    superseded_ = true;
    shutdown();
  }

 private:
  struct Slot {
    std::optional<Batch> batch;
    std::int64_t number = -1;
    std::exception_ptr error;
    bool ready = false;
  };

  void check_usable(const char* what) {
    DTRAIN_CHECK(!superseded_, "DataLoader: cannot {} an iterator whose pass was replaced by a later begin()", what);
    if (error_) std::rethrow_exception(error_);
    DTRAIN_CHECK(!done(), "DataLoader: cannot {} the end iterator", what);
  }

  // Waits (counted as the consumer's wait) until position pos_'s slot is filled or the
  // pass ends before it. The caller holds mu_.
  void wait_for_slot(std::unique_lock<std::mutex>& lock) {
    Slot& s = slots_[static_cast<std::size_t>(pos_) % slots_.size()];
    if (s.ready || pos_ >= end_) return;
    const auto start = std::chrono::steady_clock::now();
    ready_cv_.wait(lock, [&] { return s.ready || pos_ >= end_; });
    *waited_ns_ +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  }

  // Moves batch pos_ out of its slot, waiting for it; rethrows the worker's error.
  void take() {
    Slot slot;
    {
      std::unique_lock lock(mu_);
      wait_for_slot(lock);
      Slot& s = slots_[static_cast<std::size_t>(pos_) % slots_.size()];
      slot = std::move(s);
      s = Slot{};
      ++taken_;
    }
    claim_cv_.notify_one();  // the window moved: one more batch may be claimed
    if (slot.error) {
      error_ = slot.error;
      shutdown();
      std::rethrow_exception(error_);
    }
    current_ = std::move(*slot.batch);
    current_number_ = slot.number;
    has_current_ = true;
  }

  // The next position with room in the window, or nullopt when the pass stops or ends.
  std::optional<std::int64_t> next_position(std::unique_lock<std::mutex>& lock) {
    const auto window = static_cast<std::int64_t>(slots_.size());
    claim_cv_.wait(lock, [&] { return stopping_ || next_claim_ >= end_ || next_claim_ < taken_ + window; });
    if (stopping_ || next_claim_ >= end_) return std::nullopt;
    return next_claim_;
  }

  // The batch number at position p of a claimed pass, from claim_(); nullopt at its end
  // (recorded). Serialized by claim_mu_, so positions are claimed in order.
  std::optional<std::int64_t> claim_batch(std::int64_t p) {
    const std::optional<std::int64_t> b = claim_();
    DTRAIN_CHECK(!b || (*b >= 0 && *b < num_batches_), "DataLoader: the claim returned batch {}, outside the epoch's "
                 "{} batches", *b, num_batches_);
    if (!b) {
      {
        std::lock_guard lock(mu_);
        end_ = p;
      }
      ready_cv_.notify_all();
      claim_cv_.notify_all();
    }
    return b;
  }

  void work() {
    const auto window = static_cast<std::int64_t>(slots_.size());
    for (;;) {
      std::int64_t p = 0, b = 0;
      Slot result;
      if (claim_) {
        std::lock_guard claiming(claim_mu_);
        {
          std::unique_lock lock(mu_);
          const std::optional<std::int64_t> next = next_position(lock);
          if (!next) return;
          p = *next;
        }
        try {
          const std::optional<std::int64_t> claimed = claim_batch(p);
          if (!claimed) return;
          b = *claimed;
        } catch (...) {
          result.error = std::current_exception();
        }
        std::lock_guard lock(mu_);
        next_claim_ = p + 1;
      } else {
        std::unique_lock lock(mu_);
        const std::optional<std::int64_t> next = next_position(lock);
        if (!next) return;
        p = b = next_claim_++;
      }
      if (!result.error) {
        try {
          const auto first = indices_.begin() + b * batch_size_;
          const auto last = indices_.begin() + std::min<std::int64_t>((b + 1) * batch_size_, std::ssize(indices_));
          result.batch = dataset_->get_epoch_batch(std::vector<std::int64_t>(first, last), epoch_);
          if (pin_memory_) {  // on this worker, so the consumer's upload can start at once
            result.batch->inputs = result.batch->inputs.pin_memory();
            result.batch->targets = result.batch->targets.pin_memory();
          }
        } catch (...) {
          result.error = std::current_exception();
        }
      }
      result.number = b;
      result.ready = true;
      const bool failed = result.error != nullptr;
      {
        std::lock_guard lock(mu_);
        slots_[static_cast<std::size_t>(p % window)] = std::move(result);
        // Later batches would never be delivered; the earlier ones are already claimed.
        if (failed) stopping_ = true;
      }
      ready_cv_.notify_one();
      if (failed) claim_cv_.notify_all();
    }
  }

  // Stops claiming new batches and joins the workers (each finishes the batch it holds).
  void shutdown() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    claim_cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  const std::shared_ptr<const Dataset> dataset_;
  const std::shared_ptr<std::atomic<std::int64_t>> waited_ns_;  // the loader's, summed over its passes
  const std::vector<std::int64_t> indices_;
  const std::int64_t epoch_;
  const std::int64_t batch_size_;
  const bool pin_memory_;
  const std::int64_t num_batches_;
  const BatchClaim claim_;  // empty: position p is batch p
  std::mutex claim_mu_;     // one claim at a time

  std::mutex mu_;
  std::condition_variable claim_cv_;  // workers wait for room in the window (or stop)
  std::condition_variable ready_cv_;  // the consumer waits for its slot to fill (or the end)
  std::int64_t end_;                  // guarded by mu_: the first position past the pass
  std::vector<Slot> slots_;           // guarded by mu_
  std::int64_t next_claim_ = 0;       // guarded by mu_
  std::int64_t taken_ = 0;            // guarded by mu_
  bool stopping_ = false;             // guarded by mu_

  // Consumer-thread state.
  std::int64_t pos_ = 0;
  bool has_current_ = false;
  Batch current_;
  std::int64_t current_number_ = -1;
  std::exception_ptr error_;
  bool superseded_ = false;
  std::vector<std::thread> threads_;
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
                       std::shared_ptr<const Sampler> sampler)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {
  DTRAIN_CHECK(dataset_, "DataLoader: the dataset is null");
  DTRAIN_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be >= 1, got {}", options_.batch_size);
  DTRAIN_CHECK(options_.prefetch_batches >= 1, "DataLoader: prefetch_batches must be >= 1, got {}",
               options_.prefetch_batches);
  DTRAIN_CHECK(options_.workers >= 1, "DataLoader: workers must be >= 1, got {}", options_.workers);
  DTRAIN_CHECK(!options_.pin_memory || cuda::available(), "DataLoader: pin_memory needs a CUDA device: {}",
               cuda::unavailable_reason());
  DTRAIN_CHECK(!(sampler_ && options_.shuffle),
               "DataLoader: shuffle=true together with an explicit sampler; the sampler decides the order, so pass "
               "one or the other");
  if (!sampler_) {
    if (options_.shuffle)
      sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
    else
      sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

double DataLoader::wait_seconds() const { return static_cast<double>(waited_ns_->load()) * 1e-9; }

std::int64_t DataLoader::num_batches() const {
  const std::int64_t n = sampler_->size();
  return options_.drop_last ? n / options_.batch_size : (n + options_.batch_size - 1) / options_.batch_size;
}

void DataLoader::set_epoch(std::int64_t epoch) {
  DTRAIN_CHECK(epoch >= 0, "DataLoader::set_epoch: epoch must be >= 0, got {}", epoch);
  epoch_ = epoch;
}

DataLoader::Iterator DataLoader::begin() { return begin_at(0); }

DataLoader::Iterator DataLoader::begin_at(std::int64_t first_batch) {
  DTRAIN_CHECK(first_batch >= 0 && first_batch <= num_batches(),
               "DataLoader::begin_at: batch {} is outside the epoch's {} batches", first_batch, num_batches());
  if (auto previous = active_.lock()) previous->supersede();
  std::vector<std::int64_t> indices = sampler_->indices(epoch_);
  DTRAIN_CHECK(std::ssize(indices) == sampler_->size(),
               "DataLoader: the sampler returned {} indices for epoch {} but its size() is {}", indices.size(), epoch_,
               sampler_->size());
  auto pass = std::make_shared<Pass>(dataset_, std::move(indices), epoch_, options_.batch_size, num_batches(),
                                     first_batch, std::max(options_.prefetch_batches, options_.workers), options_.workers,
                                     options_.pin_memory, waited_ns_);
  active_ = pass;
  return Iterator(std::move(pass));
}

DataLoader::Iterator DataLoader::begin_claimed(BatchClaim claim) {
  DTRAIN_CHECK(claim != nullptr, "DataLoader::begin_claimed: no claim function given");
  if (auto previous = active_.lock()) previous->supersede();
  std::vector<std::int64_t> indices = sampler_->indices(epoch_);
  DTRAIN_CHECK(std::ssize(indices) == sampler_->size(),
               "DataLoader: the sampler returned {} indices for epoch {} but its size() is {}", indices.size(), epoch_,
               sampler_->size());
  auto pass = std::make_shared<Pass>(dataset_, std::move(indices), epoch_, options_.batch_size, num_batches(), 0,
                                     std::max(options_.prefetch_batches, options_.workers), options_.workers,
                                     options_.pin_memory, waited_ns_, std::move(claim));
  active_ = pass;
  return Iterator(std::move(pass));
}

std::int64_t DataLoader::Iterator::batch_number() const {
  DTRAIN_CHECK(pass_, "DataLoader: the end iterator has no batch number");
  return pass_->current_number();
}

Batch& DataLoader::Iterator::operator*() const {
  DTRAIN_CHECK(pass_, "DataLoader: cannot dereference the end iterator");
  return pass_->current();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  DTRAIN_CHECK(pass_, "DataLoader: cannot increment the end iterator");
  pass_->advance();
  return *this;
}

bool DataLoader::Iterator::at_end() const { return !pass_ || pass_->done(); }

bool operator==(const DataLoader::Iterator& a, const DataLoader::Iterator& b) {
  return (a.at_end() && b.at_end()) || a.pass_ == b.pass_;
}

}  // namespace dtrain::data
