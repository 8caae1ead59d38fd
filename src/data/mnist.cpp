#include "dtrain/data/mnist.h"

#include "data/gzip_file.h"
#include "dtrain/core/error.h"
#include "dtrain/core/parallel.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace dtrain::data {
namespace {

namespace fs = std::filesystem;

// IDX magic numbers: two zero bytes, the element type (0x08 = unsigned byte), the rank.
constexpr std::uint32_t kImageMagic = 0x00000803;
constexpr std::uint32_t kLabelMagic = 0x00000801;
constexpr std::size_t kImageHeader = 16;  // magic, count, rows, cols
constexpr std::size_t kLabelHeader = 8;   // magic, count
// Far above any MNIST-family image (28x28); rejects garbage headers before any arithmetic.
constexpr std::int64_t kMaxSide = 4096;
// Pixels per parallel_for chunk of a batch: enough work to pay for a thread hand-off.
constexpr std::int64_t kGrainPixels = 32 * 1024;

std::int64_t read_be32(const std::uint8_t* p) {
  return (std::int64_t{p[0]} << 24) | (std::int64_t{p[1]} << 16) | (std::int64_t{p[2]} << 8) | std::int64_t{p[3]};
}

// `dir`/`base`, or `dir`/`base`.gz when only that exists.
fs::path find_file(const fs::path& dir, const std::string& base) {
  const fs::path candidates[] = {dir / base, dir / (base + ".gz")};
  for (const auto& path : candidates)
    if (fs::is_regular_file(path)) return path;
  DTRAIN_FAIL("MNIST: no {} file in '{}' (tried '{}' and '{}')", base, dir.string(), candidates[0].filename().string(),
              candidates[1].filename().string());
}

struct ImageHeader {
  std::int64_t count, rows, cols;
};

ImageHeader check_images(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  const std::string name = path.string();
  DTRAIN_CHECK(bytes.size() >= kImageHeader,
               "'{}': expected an IDX image file (a {}-byte header starting with magic 0x{:08x}) but the file holds "
               "only {} bytes",
               name, kImageHeader, kImageMagic, bytes.size());
  const std::int64_t magic = read_be32(bytes.data());
  DTRAIN_CHECK(magic == kImageMagic,
               "'{}': wrong magic number 0x{:08x}: expected 0x{:08x} (IDX images of unsigned bytes)", name, magic,
               kImageMagic);
  ImageHeader h{read_be32(bytes.data() + 4), read_be32(bytes.data() + 8), read_be32(bytes.data() + 12)};
  DTRAIN_CHECK(h.count >= 1 && h.rows >= 1 && h.rows <= kMaxSide && h.cols >= 1 && h.cols <= kMaxSide,
               "'{}': header says {} images of {}x{}: expected at least one image with 1..{} rows and columns", name,
               h.count, h.rows, h.cols, kMaxSide);
  const std::int64_t promised = h.count * h.rows * h.cols;  // < 2^56: no overflow
  const auto held = static_cast<std::int64_t>(bytes.size() - kImageHeader);
  DTRAIN_CHECK(promised == held,
               "'{}': header promises {} images of {}x{} = {} bytes but the file holds {} bytes of pixels", name,
               h.count, h.rows, h.cols, promised, held);
  return h;
}

std::int64_t check_labels(const fs::path& path, const std::vector<std::uint8_t>& bytes, std::int64_t num_classes) {
  const std::string name = path.string();
  DTRAIN_CHECK(bytes.size() >= kLabelHeader,
               "'{}': expected an IDX label file (an {}-byte header starting with magic 0x{:08x}) but the file holds "
               "only {} bytes",
               name, kLabelHeader, kLabelMagic, bytes.size());
  const std::int64_t magic = read_be32(bytes.data());
  DTRAIN_CHECK(magic == kLabelMagic,
               "'{}': wrong magic number 0x{:08x}: expected 0x{:08x} (IDX labels of unsigned bytes)", name, magic,
               kLabelMagic);
  const std::int64_t count = read_be32(bytes.data() + 4);
  DTRAIN_CHECK(count >= 1, "'{}': header says 0 labels: expected at least one", name);
  const auto held = static_cast<std::int64_t>(bytes.size() - kLabelHeader);
  DTRAIN_CHECK(count == held, "'{}': header promises {} labels but the file holds {} bytes of labels", name, count,
               held);
  auto bad = std::find_if(bytes.begin() + kLabelHeader, bytes.end(), [&](std::uint8_t v) { return v >= num_classes; });
  DTRAIN_CHECK(bad == bytes.end(), "'{}': label {} at index {} is out of range: expected 0..{}", name, *bad,
               bad - bytes.begin() - static_cast<std::ptrdiff_t>(kLabelHeader), num_classes - 1);
  return count;
}

}  // namespace

std::shared_ptr<MnistDataset> MnistDataset::load(const fs::path& dir, Split split, MnistOptions options) {
  DTRAIN_CHECK(std::isfinite(options.mean) && std::isfinite(options.std) && options.std > 0,
               "MnistDataset::load: expected a finite mean and a positive finite std, got mean {} std {}", options.mean,
               options.std);
  DTRAIN_CHECK(fs::exists(dir), "MNIST: directory '{}' does not exist", dir.string());
  DTRAIN_CHECK(fs::is_directory(dir), "MNIST: '{}' is not a directory", dir.string());
  const std::string prefix = split == Split::Train ? "train" : "t10k";
  const fs::path image_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const fs::path label_path = find_file(dir, prefix + "-labels-idx1-ubyte");

  // A .gz file's decompressed size is known only after reading it all: validate afterwards.
  std::vector<std::uint8_t> images = read_file_bytes(image_path);
  const ImageHeader h = check_images(image_path, images);
  std::vector<std::uint8_t> labels = read_file_bytes(label_path);
  const std::int64_t label_count = check_labels(label_path, labels, kNumClasses);
  DTRAIN_CHECK(h.count == label_count, "MNIST: '{}' holds {} images but '{}' holds {} labels: expected as many of each",
               image_path.string(), h.count, label_path.string(), label_count);
  return std::shared_ptr<MnistDataset>(
      new MnistDataset(std::move(images), std::move(labels), h.count, h.rows, h.cols, options));
}

MnistDataset::MnistDataset(std::vector<std::uint8_t> image_file, std::vector<std::uint8_t> label_file,
                           std::int64_t count, std::int64_t rows, std::int64_t cols, MnistOptions options)
    : image_file_(std::move(image_file)),
      label_file_(std::move(label_file)),
      count_(count),
      rows_(rows),
      cols_(cols),
      options_(options) {
  for (int v = 0; v < 256; ++v) lut_[v] = static_cast<float>((v / 255.0 - options.mean) / options.std);
}

void MnistDataset::check_index(std::int64_t index, const char* op) const {
  DTRAIN_CHECK(index >= 0 && index < count_, "{}: index {} is out of range for {} examples", op, index, count_);
}

void MnistDataset::fill_pixels(std::int64_t index, float* out) const {
  const std::int64_t pixels = rows_ * cols_;
  const std::uint8_t* src = image_file_.data() + kImageHeader + index * pixels;
  for (std::int64_t k = 0; k < pixels; ++k) out[k] = lut_[src[k]];
}

Example MnistDataset::get(std::int64_t index) const {
  check_index(index, "MnistDataset::get");
  Example ex{Tensor::empty({1, rows_, cols_}), Tensor::empty({}, {DType::i64})};
  fill_pixels(index, ex.input.data<float>());
  *ex.target.data<std::int64_t>() = label_file_[kLabelHeader + index];
  return ex;
}

Batch MnistDataset::get_batch(const std::vector<std::int64_t>& indices) const {
  for (auto index : indices) check_index(index, "MnistDataset::get_batch");
  const auto n = static_cast<std::int64_t>(indices.size());
  Batch batch{Tensor::empty({n, 1, rows_, cols_}), Tensor::empty({n}, {DType::i64})};
  float* inputs = batch.inputs.data<float>();
  std::int64_t* targets = batch.targets.data<std::int64_t>();
  const std::int64_t pixels = rows_ * cols_;
  parallel_for(0, n, std::max<std::int64_t>(1, kGrainPixels / pixels), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      fill_pixels(indices[i], inputs + i * pixels);
      targets[i] = label_file_[kLabelHeader + indices[i]];
    }
  });
  return batch;
}

}  // namespace dtrain::data
