// MNIST-format datasets (MNIST, Fashion-MNIST, KMNIST, ...): IDX files of u8 images and
// labels, plain or gzip-compressed, held in memory as the raw bytes and normalized on read.
#pragma once

#include "dtrain/data/dataset.h"

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

namespace dtrain::data {

// Inputs are (pixel / 255 - mean) / std. The defaults are Fashion-MNIST's published
// training-set statistics (the trainers' default data); for the original MNIST use
// mean 0.1307, std 0.3081.
struct MnistOptions {
  float mean = 0.2860f;
  float std = 0.3530f;
};

class MnistDataset final : public Dataset {
 public:
  enum class Split { Train, Test };

  // Reads `dir`/{train,t10k}-images-idx3-ubyte and the matching -labels-idx1-ubyte, each
  // plain or with a .gz suffix (the plain file wins when both exist). Throws dtrain::Error
  // naming the file and what was expected when a file is missing, truncated or malformed,
  // when image and label counts differ, or when a label is not in [0, num_classes()).
  static std::shared_ptr<MnistDataset> load(const std::filesystem::path& dir, Split split, MnistOptions options = {});

  std::int64_t size() const override { return count_; }
  // input: f32 (1, rows, cols); target: i64 scalar.
  Example get(std::int64_t index) const override;
  // inputs: f32 (N, 1, rows, cols); targets: i64 (N). Filled directly from the raw bytes.
  Batch get_batch(const std::vector<std::int64_t>& indices) const override;

  static constexpr std::int64_t kNumClasses = 10;
  std::int64_t num_classes() const { return kNumClasses; }
  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  const MnistOptions& options() const { return options_; }

 private:
  MnistDataset(std::vector<std::uint8_t> image_file, std::vector<std::uint8_t> label_file, std::int64_t count,
               std::int64_t rows, std::int64_t cols, MnistOptions options);
  void check_index(std::int64_t index, const char* op) const;
  // Writes the normalized pixels of example `index` to out[0, rows*cols).
  void fill_pixels(std::int64_t index, float* out) const;

  // The whole decompressed files, headers included: pixels start at byte 16, labels at 8.
  std::vector<std::uint8_t> image_file_;
  std::vector<std::uint8_t> label_file_;
  std::int64_t count_;
  std::int64_t rows_;
  std::int64_t cols_;
  MnistOptions options_;
  std::array<float, 256> lut_;  // pixel value -> normalized input
};

}  // namespace dtrain::data
