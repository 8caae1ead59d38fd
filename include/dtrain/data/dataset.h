// Random-access datasets: the interface every data source implements and the loader reads.
#pragma once

#include "dtrain/tensor/tensor.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace dtrain::data {

class Sampler;

// One sample: the model input and its target (for classification, an i64 scalar label).
struct Example {
  Tensor input;
  Tensor target;
};

// Samples stacked along a new leading dimension: inputs (N, ...input shape),
// targets (N, ...target shape).
struct Batch {
  Tensor inputs;
  Tensor targets;
};

class Dataset {
 public:
  virtual ~Dataset();
  virtual std::int64_t size() const = 0;
  // The example at `index` in [0, size()), as CPU tensors. Must be safe to call from several
  // threads at once: the data loader assembles batches on background threads.
  virtual Example get(std::int64_t index) const = 0;
  // The examples at `indices` stacked into one batch (same thread-safety as get()). The
  // default calls get() per index and copies the results, which must agree in shape and
  // dtype (it needs at least one index to learn them); datasets that can fill the batch
  // tensors directly override it for speed.
  virtual Batch get_batch(const std::vector<std::int64_t>& indices) const;
  // The batch as epoch `epoch` (>= 0) sees it. Datasets with random augmentation draw it
  // from (their seed, epoch, index), so that every epoch sees fresh crops and a rerun the
  // same ones; the default ignores the epoch. The data loader calls this one.
  virtual Batch get_epoch_batch(const std::vector<std::int64_t>& indices, std::int64_t epoch) const;

  // Samples left out so far because they could not be read or decoded (a dataset told to
  // skip bad data rather than fail); 0 for datasets that never skip.
  virtual std::int64_t bad_samples_skipped() const;

  // This rank's share of the dataset and its order, for datasets whose storage dictates
  // one (records in shards, read as streams): a sampler over this dataset's indices for
  // rank `rank` of `world_size`, shuffled by (seed, epoch) when `training`. Every rank's
  // sampler must have the same size() when training (the ranks step together). Null (the
  // default): the Trainer uses a DistributedSampler, and a strided Subset to evaluate.
  virtual std::shared_ptr<const Sampler> rank_sampler(int rank, int world_size, std::uint64_t seed,
                                                      bool training) const;
  // Whether the training shares keep the epoch's global order: update u of an epoch takes
  // the same samples (positions [u G, (u + 1) G) of one order, G the global batch) however
  // many ranks share it, so that a run resumed inside an epoch on another number of ranks
  // takes every sample of it once. True for the Trainer's default (DistributedSampler's
  // strided shares); a rank_sampler that deals whole shards to ranks says false.
  virtual bool shares_keep_global_order() const;
};

}  // namespace dtrain::data
