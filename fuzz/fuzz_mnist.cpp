// The IDX (MNIST-format) reader, with and without gzip, as a user's folder reaches it:
// MnistDataset::load on a folder holding an image and a label file, then every example read.
//
// Input: a flags byte (bit 0: the image file is gzip data named .gz, bit 1: the label file
// is), a 16-bit big-endian length L, L bytes of the image file, and the label file as the rest
// (a shorter input gives shorter or empty files).
#include "fuzz_support.h"

#include "dtrain/core/error.h"
#include "dtrain/data/mnist.h"
#include "dtrain/tensor/tensor.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

namespace {

constexpr const char* kImages = "train-images-idx3-ubyte";
constexpr const char* kLabels = "train-labels-idx1-ubyte";

void check_dataset(const dtrain::data::MnistDataset& set) {
  using dtrain::fuzz::expect;
  const std::int64_t n = set.size();
  expect(n >= 1 && set.rows() >= 1 && set.cols() >= 1, "a loaded dataset has examples of at least 1x1");
  for (std::int64_t i = 0; i < n; ++i) {
    const dtrain::data::Example ex = set.get(i);
    expect(ex.input.shape() == dtrain::Shape{1, set.rows(), set.cols()}, "get(i).input is (1, rows, cols)");
    const std::int64_t label = ex.target.item<std::int64_t>();
    expect(label >= 0 && label < set.num_classes(), "get(i).target is a class index");
  }
  std::vector<std::int64_t> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  const dtrain::data::Batch batch = set.get_batch(all);
  expect(batch.inputs.shape() == dtrain::Shape{n, 1, set.rows(), set.cols()},
         "get_batch(all).inputs is (N, 1, rows, cols)");
  dtrain::fuzz::accepted(std::to_string(n) + " examples of " + std::to_string(set.rows()) + "x" +
                         std::to_string(set.cols()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  const std::uint8_t flags = size > 0 ? data[0] : 0;
  const std::size_t image_size = size >= 3 ? std::min<std::size_t>((std::size_t{data[1]} << 8) | data[2], size - 3) : 0;
  const std::uint8_t* image = data + std::min<std::size_t>(size, 3);
  const std::uint8_t* label = image + image_size;
  const std::size_t label_size = size - static_cast<std::size_t>(label - data);

  const fs::path dir = dtrain::fuzz::scratch_dir() / "mnist";
  fs::remove_all(dir);
  fs::create_directories(dir);
  dtrain::fuzz::write_file(dir / (std::string(kImages) + (flags & 1 ? ".gz" : "")), image, image_size);
  dtrain::fuzz::write_file(dir / (std::string(kLabels) + (flags & 2 ? ".gz" : "")), label, label_size);
  try {
    check_dataset(*dtrain::data::MnistDataset::load(dir, dtrain::data::MnistDataset::Split::Train));
  } catch (const dtrain::Error& e) {
    dtrain::fuzz::rejected(e);
  }
  return 0;
}
