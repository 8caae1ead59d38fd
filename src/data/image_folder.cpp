#include "data/gzip_file.h"
#include "data/image_batch.h"
#include "dtrain/core/error.h"
#include "dtrain/core/log.h"
#include "dtrain/data/image_dataset.h"

#include <fmt/ranges.h>

namespace dtrain::data {

std::shared_ptr<ImageFolder> ImageFolder::open(const std::filesystem::path& split_dir, ImageDatasetOptions options,
                                               const std::vector<std::string>& classes) {
  ImageFolderIndex index = index_image_folder(split_dir, classes);
  if (!index.empty_classes.empty()) {
    DTRAIN_CHECK(options.bad_images == BadImagePolicy::Skip,
                 "image folder '{}': class folder(s) {} hold no images (every class needs at least one; "
                 "--bad-images skip trains without them)",
                 split_dir.string(), fmt::join(index.empty_classes, ", "));
    spdlog::warn("image folder '{}': class folder(s) {} hold no images", split_dir.string(),
                 fmt::join(index.empty_classes, ", "));
  }
  DTRAIN_CHECK(!index.entries.empty(), "image folder '{}': no images in any class folder", split_dir.string());
  return std::shared_ptr<ImageFolder>(new ImageFolder(std::move(index), std::move(options)));
}

ImageFolder::ImageFolder(ImageFolderIndex index, ImageDatasetOptions options)
    : index_(std::move(index)), options_(std::move(options)) {}

std::filesystem::path ImageFolder::path(std::int64_t index) const {
  DTRAIN_CHECK(index >= 0 && index < size(), "ImageFolder: index {} outside [0, {})", index, size());
  return index_.root / index_.entries[static_cast<std::size_t>(index)].path;
}

Example ImageFolder::get(std::int64_t index) const {
  Batch b = get_epoch_batch({index}, 0);
  return {b.inputs.select(0, 0), b.targets.select(0, 0)};
}

Batch ImageFolder::get_epoch_batch(const std::vector<std::int64_t>& indices, std::int64_t epoch) const {
  for (auto i : indices) DTRAIN_CHECK(i >= 0 && i < size(), "ImageFolder: index {} outside [0, {})", i, size());
  return decode_image_batch(
      indices, epoch, options_,
      [&](std::size_t position) {
        const auto& entry = index_.entries[static_cast<std::size_t>(indices[position])];
        const std::filesystem::path file = index_.root / entry.path;
        return EncodedImage{read_file_bytes(file), file.string(), entry.label};
      },
      skipped_);
}

}  // namespace dtrain::data
