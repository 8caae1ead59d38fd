// Datasets of encoded images for classification (the ImageNet trainer's data): an
// ImageFolder (root/<class>/<image>, as torchvision's) and, in sharded_images.h, tar
// shards of records. Each sample is decoded and transformed on the data loader's threads:
// JPEG with DCT scaling, RandomResizedCrop and flip for training or Resize + CenterCrop for
// evaluation, normalized to f32 CHW only at the end (see image_transforms.h). The random
// draws of a sample come from (seed, epoch, index), so they are the same on every rank
// count, thread count and rerun.
#pragma once

#include "dtrain/data/dataset.h"
#include "dtrain/data/image_folder_index.h"
#include "dtrain/data/image_transforms.h"

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::data {

// What a corrupt, truncated or unreadable image does: end the run with an error naming the
// file (Fail), or leave the sample out, count it and go on (Skip). A skipped sample's row
// of the batch is filled with another sample of the same batch, so batch shapes never
// change (a pipeline or an all-reduce relies on them); a batch with no readable sample at
// all is an error either way.
enum class BadImagePolicy { Fail, Skip };
BadImagePolicy parse_bad_image_policy(const std::string& text);  // "fail" or "skip"

struct ImageDatasetOptions {
  ImageTransformOptions transform;
  std::uint64_t seed = 1;
  BadImagePolicy bad_images = BadImagePolicy::Fail;
};

class ImageFolder final : public Dataset {
 public:
  // Indexes `split_dir` (see index_image_folder; `classes` from the training split for a
  // validation split). An empty class folder is an error under Fail and a warning under Skip.
  static std::shared_ptr<ImageFolder> open(const std::filesystem::path& split_dir, ImageDatasetOptions options,
                                           const std::vector<std::string>& classes = {});

  std::int64_t size() const override { return static_cast<std::int64_t>(index_.entries.size()); }
  // input: f32 (3, size, size); target: i64 scalar. Epoch 0's draws.
  Example get(std::int64_t index) const override;
  Batch get_batch(const std::vector<std::int64_t>& indices) const override { return get_epoch_batch(indices, 0); }
  Batch get_epoch_batch(const std::vector<std::int64_t>& indices, std::int64_t epoch) const override;
  std::int64_t bad_samples_skipped() const override { return skipped_.load(); }

  const std::vector<std::string>& classes() const { return index_.classes; }
  std::filesystem::path path(std::int64_t index) const;

 private:
  ImageFolder(ImageFolderIndex index, ImageDatasetOptions options);

  ImageFolderIndex index_;
  ImageDatasetOptions options_;
  mutable std::atomic<std::int64_t> skipped_{0};
};

}  // namespace dtrain::data
