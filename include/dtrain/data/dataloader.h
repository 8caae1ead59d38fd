// DataLoader: turns a Dataset and a Sampler into a stream of batches, assembled ahead of
// the consumer by background threads.
//
//   DataLoader loader(dataset, {.batch_size = 64, .shuffle = true, .seed = 1});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.set_epoch(epoch);
//     for (Batch& batch : loader) train_step(batch);
//   }
//
// Each begin() starts a pass over the current epoch: worker threads claim batches in order,
// call Dataset::get_batch, and park the results in a bounded window of slots; the consumer
// takes them in sampler order whichever worker finished first. Threads sleep on condition
// variables (never spin). A worker's exception is rethrown to the consumer when it reaches
// that batch. The pass ends, and its threads are joined, when the last iterator of the pass
// is destroyed (so breaking out of a loop is clean) or when begin() starts a new pass.
// A pass holds what it reads (dataset, indices), so its iterators may outlive the loader.
// One consumer thread per loader.
//
// Batches handed out at run time (a parameter server's asynchronous workers, where a fast
// rank takes more of the epoch): begin_claimed(claim) numbers the batches by asking
// `claim`, from the workers, one call at a time and no further ahead than the window, so
// the claimed batches are decoded and prefetched like any others.
#pragma once

#include "dtrain/data/dataset.h"
#include "dtrain/data/sampler.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>

namespace dtrain::data {

struct DataLoaderOptions {
  std::int64_t batch_size = 64;
  // Without an explicit sampler: RandomSampler(dataset size, seed) if true, else sequential.
  bool shuffle = false;
  // Drop the last batch when it would be smaller than batch_size (otherwise it is kept).
  bool drop_last = false;
  std::uint64_t seed = 0;
  // Batches assembled ahead of the one the consumer holds. Every worker needs a batch to
  // work on, so the effective bound is max(prefetch_batches, workers).
  int prefetch_batches = 2;
  int workers = 1;
  // Workers copy each batch into pinned host memory (needs a CUDA device), so that
  // batch.inputs.to(gpu, /*non_blocking=*/true) queues the upload and returns, and the
  // upload overlaps the GPU's work; the batch's memory stays allocated until it is done.
  bool pin_memory = false;
};

class DataLoader {
  class Pass;

 public:
  // `sampler` chooses the indices of each epoch; when null, options.shuffle picks a
  // RandomSampler or a SequentialSampler over the whole dataset (both together is an error).
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
             std::shared_ptr<const Sampler> sampler = nullptr);
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  std::int64_t num_batches() const;
  // The epoch the next begin() iterates; the sampler's order depends on it.
  void set_epoch(std::int64_t epoch);
  std::int64_t epoch() const { return epoch_; }
  const DataLoaderOptions& options() const { return options_; }
  // Seconds the consumer has waited for a batch that was not ready yet, summed over every
  // pass so far: zero when the workers keep ahead of the training step.
  double wait_seconds() const;

  // Input iterator over one pass. All copies of an iterator share the pass: incrementing
  // one advances them all. Dereferencing waits for the batch (and rethrows its error).
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    Iterator() = default;  // the end iterator
    reference operator*() const;
    pointer operator->() const { return &**this; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    // Two iterators are equal when both are at the end or they are the same pass.
    friend bool operator==(const Iterator& a, const Iterator& b);
    // The number of the batch *this is (its position in the epoch's order of batches);
    // waits for it as dereferencing does.
    std::int64_t batch_number() const;

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<Pass> pass) : pass_(std::move(pass)) {}
    bool at_end() const;
    std::shared_ptr<Pass> pass_;
  };

  // Starts a pass over the current epoch, stopping the previous pass if one is running
  // (its iterators then throw when used).
  Iterator begin();
  // A pass that starts at batch `first_batch` of the epoch (in [0, num_batches()]), as a
  // run resumed from a checkpoint taken inside the epoch continues it.
  Iterator begin_at(std::int64_t first_batch);
  // A pass whose batches are chosen while it runs: `claim` returns the number of the next
  // batch to deliver (batch b holds the sampler's indices [b * batch_size, (b + 1) *
  // batch_size) of the epoch, b in [0, num_batches())), or nullopt when there are no more;
  // the pass ends there. It is called on the workers' threads, never two at once, and its
  // exception is rethrown to the consumer at the batch it was claiming. batch_number()
  // tells which batch the consumer holds.
  using BatchClaim = std::function<std::optional<std::int64_t>()>;
  Iterator begin_claimed(BatchClaim claim);
  Iterator end() { return Iterator(); }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<const Sampler> sampler_;
  DataLoaderOptions options_;
  std::int64_t epoch_ = 0;
  std::weak_ptr<Pass> active_;  // the iterators own the pass; the loader only stops it
  std::shared_ptr<std::atomic<std::int64_t>> waited_ns_ = std::make_shared<std::atomic<std::int64_t>>(0);
};

}  // namespace dtrain::data
