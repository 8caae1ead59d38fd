// Where an epoch's updates come from (private to train): this rank's fixed shard, read by
// the prefetching loader, or the batches a strategy's dispenser hands out at run time,
// claimed on the loader's threads and prefetched the same way (DataLoader::begin_claimed).
// Either way each batch's upload to the model's device is queued one batch ahead, so that
// on a GPU the copy overlaps the step before it.
#pragma once

#include "dtrain/data/dataloader.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/tensor/upload.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace dtrain::train {

// A batch whose upload to the device was queued ahead of the step that uses it: on a GPU
// the copy overlaps the previous step's kernels (upload.h); on the CPU it is the batch.
struct Staged {
  Upload inputs, targets;
  Staged(const data::Batch& b, Device device) : inputs(b.inputs, device), targets(b.targets, device) {}
};

// One update's micro-batches and its position in the epoch (from 0; the same on every
// rank for a fixed shard, the claimed batches' position where they are handed out).
struct UpdateBatches {
  std::vector<Staged> micro;
  std::int64_t position = 0;
  // Each micro-batch's number in the loader's epoch (batch b holds the sampler's indices
  // [b * batch, (b + 1) * batch)): which samples the update took (the sample log).
  std::vector<std::int64_t> numbers;
};

class BatchSource {
 public:
  // `loader`: this rank's shard, or with a dispenser every batch of the epoch's order.
  // `accumulate`: micro-batches per update.
  BatchSource(data::DataLoader& loader, Device device, int accumulate, dist::BatchDispenser* dispenser);

  // Starts the stretch of updates [first, end) of the loader's current epoch; `queue`
  // numbers the stretch among the run's (for the dispenser, the same on every rank). A
  // fixed shard's stretches continue one pass over the epoch.
  void begin(std::int64_t first, std::int64_t end, std::int64_t queue);
  // The next update of the stretch (up to `accumulate` micro-batches; the epoch's last may
  // have fewer), or nullopt at its end. Waiting for data counts as the Data phase.
  std::optional<UpdateBatches> next();
  // Ends the epoch's pass (its threads stop).
  void finish();

 private:
  void stage_next();

  data::DataLoader& loader_;
  Device device_;
  int accumulate_;
  dist::BatchDispenser* dispenser_;
  std::optional<data::DataLoader::Iterator> it_;
  std::optional<Staged> next_;    // the batch staged ahead
  std::int64_t next_number_ = 0;  // its batch number in the epoch
  std::int64_t position_ = 0, end_ = 0;
};

}  // namespace dtrain::train
