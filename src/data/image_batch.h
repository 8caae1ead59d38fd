// Decoding a batch of encoded images into the (N, 3, S, S) inputs and (N) labels that
// every image dataset returns, with the bad-image policy applied in one place.
#pragma once

#include "dtrain/data/image_dataset.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::data {

struct EncodedImage {
  std::vector<std::uint8_t> bytes;
  std::string name;  // a file path, or "<shard>:<key>": what error messages name
  std::int64_t label = 0;
};

// Fetches (fetch(i) for position i of `indices`; it may throw dtrain::Error for an
// unreadable sample), decodes and transforms each sample with SampleRng(seed, epoch,
// indices[i]). Under BadImagePolicy::Skip a bad sample's row is filled with another
// sample's and `skipped` counts it.
Batch decode_image_batch(const std::vector<std::int64_t>& indices, std::int64_t epoch,
                         const ImageDatasetOptions& options,
                         const std::function<EncodedImage(std::size_t position)>& fetch,
                         std::atomic<std::int64_t>& skipped);

}  // namespace dtrain::data
