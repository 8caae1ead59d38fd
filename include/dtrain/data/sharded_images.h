// Images stored as WebDataset-style tar shards (<dir>/*.tar of "<key>.jpg" + "<key>.cls"
// members, written by dtrain-make-shards or any WebDataset tool; <dir>/classes.txt names the
// classes). Folders of millions of small files are slow on shared file systems; a few
// hundred large files read front to back are not, which is why TFRecord, RecordIO and
// WebDataset exist.
//
// How an epoch reads them (rank_sampler): the shards are permuted by (seed, epoch) and
// dealt out whole, rank r taking shards r, r + W, ...; each rank streams its shards in that
// order through a shuffle buffer of `shuffle_buffer` samples (seeded by seed, epoch and
// rank): once the buffer is full, each new sample replaces a uniformly drawn one, which is
// emitted. Every rank takes ceil(total / W) samples per epoch so that the ranks step
// together: a rank whose shards hold fewer reads its first ones again, one whose hold more
// stops early (a different remainder each epoch). Evaluation deals the shards out the same
// way in their stored order, without a buffer and without padding.
//
// The sampler computes that order as sample indices; the dataset serves them from one
// sequential reader per shard position (libarchive, front to back), keeping samples read
// ahead until they are asked for, so the file reads are the stream's. Asked for a sample
// behind its reader (another access pattern, such as a Subset), it reopens the shard and
// reads forward: correct for any order, fast for the stream's.
#pragma once

#include "dtrain/data/image_dataset.h"

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dtrain::data {

class ShardStream;

struct ShardedImagesOptions {
  ImageDatasetOptions images;
  std::int64_t shuffle_buffer = 2000;  // samples; 1 = no shuffling within the stream
  std::int64_t max_samples = 0;        // > 0: only the first max_samples (whole leading shards, then part of one)
};

class ShardedImages final : public Dataset {
 public:
  // Lists `dir`'s shards (list_shards) and its classes.txt (`classes`, when given, must
  // match it: a validation split takes the training split's). Throws naming the folder or
  // file when either is missing or unreadable.
  static std::shared_ptr<ShardedImages> open(const std::filesystem::path& dir, ShardedImagesOptions options,
                                             const std::vector<std::string>& classes = {});
  ~ShardedImages() override;

  std::int64_t size() const override { return total_; }
  Example get(std::int64_t index) const override;
  Batch get_batch(const std::vector<std::int64_t>& indices) const override { return get_epoch_batch(indices, 0); }
  Batch get_epoch_batch(const std::vector<std::int64_t>& indices, std::int64_t epoch) const override;
  std::int64_t bad_samples_skipped() const override { return skipped_.load(); }
  // Throws when training on more ranks than there are shards (each rank reads whole shards).
  std::shared_ptr<const Sampler> rank_sampler(int rank, int world_size, std::uint64_t seed,
                                              bool training) const override;
  // False: a rank reads whole shards, so which samples an update takes depends on the ranks.
  bool shares_keep_global_order() const override { return false; }

  const std::vector<std::string>& classes() const { return classes_; }
  std::int64_t num_shards() const { return static_cast<std::int64_t>(shard_paths_.size()); }

 private:
  ShardedImages(std::filesystem::path dir, std::vector<std::filesystem::path> shards,
                std::vector<std::int64_t> counts, std::vector<std::string> classes, ShardedImagesOptions options);

  std::filesystem::path dir_;
  std::vector<std::filesystem::path> shard_paths_;
  std::vector<std::int64_t> first_;  // shard s holds samples [first_[s], first_[s + 1])
  std::int64_t total_ = 0;
  std::vector<std::string> classes_;
  ShardedImagesOptions options_;
  std::unique_ptr<ShardStream> stream_;
  mutable std::atomic<std::int64_t> skipped_{0};
};

// The order rank_sampler gives for training (exposed for tests): rank `rank`'s sample
// indices in `epoch`, for shards holding counts[s] samples each.
std::vector<std::int64_t> sharded_epoch_order(const std::vector<std::int64_t>& counts, int rank, int world_size,
                                              std::uint64_t seed, std::int64_t epoch, std::int64_t shuffle_buffer);

}  // namespace dtrain::data
