#include "data/image_batch.h"

#include "dtrain/core/error.h"
#include "dtrain/core/log.h"

#include <cstring>
#include <optional>

namespace dtrain::data {
namespace {

// A warning per skipped sample would flood the log on a badly damaged data set; the
// counts go into the epoch report anyway.
constexpr std::int64_t kWarnedSkips = 10;

}  // namespace

BadImagePolicy parse_bad_image_policy(const std::string& text) {
  if (text == "fail") return BadImagePolicy::Fail;
  if (text == "skip") return BadImagePolicy::Skip;
  DTRAIN_FAIL("bad-image policy '{}': expected fail or skip", text);
}

Batch decode_image_batch(const std::vector<std::int64_t>& indices, std::int64_t epoch,
                         const ImageDatasetOptions& options,
                         const std::function<EncodedImage(std::size_t position)>& fetch,
                         std::atomic<std::int64_t>& skipped) {
  DTRAIN_CHECK(!indices.empty(), "image dataset: expected at least one index");
  const auto n = static_cast<std::int64_t>(indices.size());
  const std::int64_t size = options.transform.size;
  const std::int64_t row = 3 * size * size;
  Batch batch{Tensor::empty({n, 3, size, size}), Tensor::empty({n}, {DType::i64, Device::cpu()})};
  float* inputs = batch.inputs.data<float>();
  std::int64_t* labels = batch.targets.data<std::int64_t>();
  std::vector<std::size_t> bad;
  std::optional<std::string> first_error;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    try {
      const EncodedImage image = fetch(i);
      SampleRng rng(options.seed, epoch, indices[i]);
      load_image(image.bytes.data(), image.bytes.size(), image.name, options.transform, rng,
                 inputs + static_cast<std::int64_t>(i) * row);
      labels[i] = image.label;
    } catch (const Error& e) {
      if (options.bad_images == BadImagePolicy::Fail) throw;
      if (!first_error) first_error = e.message();
      bad.push_back(i);
      if (skipped.fetch_add(1) < kWarnedSkips) spdlog::warn("skipping a bad image: {}", e.message());
    }
  }
  if (bad.empty()) return batch;
  DTRAIN_CHECK(bad.size() < indices.size(), "every one of the {} samples of a batch is bad; the first: {}", n,
               *first_error);
  // Fill each bad row with a good sample of the batch, round robin over the good ones.
  std::vector<std::size_t> good;
  for (std::size_t i = 0, b = 0; i < indices.size(); ++i) {
    if (b < bad.size() && bad[b] == i) {
      ++b;
    } else {
      good.push_back(i);
    }
  }
  for (std::size_t k = 0; k < bad.size(); ++k) {
    const std::size_t from = good[k % good.size()], to = bad[k];
    std::memcpy(inputs + static_cast<std::int64_t>(to) * row, inputs + static_cast<std::int64_t>(from) * row,
                static_cast<std::size_t>(row) * sizeof(float));
    labels[to] = labels[from];
  }
  return batch;
}

}  // namespace dtrain::data
