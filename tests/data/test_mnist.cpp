#include "data/idx_files.h"
#include "dtrain/data/mnist.h"

#include <cmath>

using namespace dtrain;
using namespace dtrain::data;
using dtrain::test::be32;
using dtrain::test::idx_images;
using dtrain::test::idx_labels;
using dtrain::test::require_error;
using dtrain::test::TempDir;
using dtrain::test::write_file;
using dtrain::test::write_gzip;

namespace {

constexpr std::uint32_t kCount = 5, kRows = 3, kCols = 4;

std::vector<std::uint8_t> sample_pixels(std::uint32_t count = kCount) {
  std::vector<std::uint8_t> p(count * kRows * kCols);
  for (std::size_t k = 0; k < p.size(); ++k) p[k] = static_cast<std::uint8_t>((k * 37 + 11) % 256);
  p[0] = 0;
  p[1] = 255;
  return p;
}
const std::vector<std::uint8_t> kLabels = {3, 0, 9, 1, 7};

void write_plain_set(const TempDir& dir, const std::string& prefix = "train") {
  write_file(dir / (prefix + "-images-idx3-ubyte"), idx_images(kCount, kRows, kCols, sample_pixels()));
  write_file(dir / (prefix + "-labels-idx1-ubyte"), idx_labels(kLabels));
}

// Expected normalized pixel k of example i, in double.
double expected_pixel(std::size_t i, std::size_t k, double mean, double std) {
  return (sample_pixels()[i * kRows * kCols + k] / 255.0 - mean) / std;
}

void check_examples(const MnistDataset& ds, double mean, double std) {
  REQUIRE(ds.size() == kCount);
  REQUIRE(ds.rows() == kRows);
  REQUIRE(ds.cols() == kCols);
  REQUIRE(ds.num_classes() == 10);
  for (std::size_t i = 0; i < kCount; ++i) {
    Example ex = ds.get(static_cast<std::int64_t>(i));
    REQUIRE(ex.input.shape() == Shape{1, kRows, kCols});
    REQUIRE(ex.input.dtype() == DType::f32);
    REQUIRE(ex.target.shape() == Shape{});
    REQUIRE(ex.target.dtype() == DType::i64);
    CHECK(ex.target.to_vector<std::int64_t>()[0] == kLabels[i]);
    auto values = ex.input.to_vector<float>();
    for (std::size_t k = 0; k < values.size(); ++k)
      CHECK(values[k] == Approx(expected_pixel(i, k, mean, std)).margin(1e-6));
  }
}

}  // namespace

TEST_CASE("MnistDataset reads plain IDX files and normalizes", "[cpu][data]") {
  TempDir dir;
  write_plain_set(dir);
  auto ds = MnistDataset::load(dir.path(), MnistDataset::Split::Train, {.mean = 0.5f, .std = 0.25f});
  check_examples(*ds, 0.5, 0.25);
  CHECK(ds->get(0).input.to_vector<float>()[0] == Approx(-2.0));  // pixel 0
  CHECK(ds->get(0).input.to_vector<float>()[1] == Approx(2.0));   // pixel 255
}

TEST_CASE("MnistDataset reads gzip files, the Test split and default statistics", "[cpu][data]") {
  TempDir dir;
  write_gzip(dir / "t10k-images-idx3-ubyte.gz", idx_images(kCount, kRows, kCols, sample_pixels()));
  write_gzip(dir / "t10k-labels-idx1-ubyte.gz", idx_labels(kLabels));
  auto ds = MnistDataset::load(dir.path(), MnistDataset::Split::Test);
  check_examples(*ds, 0.2860, 0.3530);
  require_error([&] { MnistDataset::load(dir.path(), MnistDataset::Split::Train); }, {"train-images-idx3-ubyte"});
}

TEST_CASE("MnistDataset prefers the plain file when both exist", "[cpu][data]") {
  TempDir dir;
  write_plain_set(dir);
  write_gzip(dir / "train-labels-idx1-ubyte.gz", idx_labels({0, 0, 0, 0, 0}));
  auto ds = MnistDataset::load(dir.path(), MnistDataset::Split::Train);
  CHECK(ds->get(0).target.to_vector<std::int64_t>()[0] == 3);
}

TEST_CASE("MnistDataset::get_batch matches get", "[cpu][data]") {
  TempDir dir;
  write_plain_set(dir);
  auto ds = MnistDataset::load(dir.path(), MnistDataset::Split::Train);
  const std::vector<std::int64_t> indices = {4, 0, 4, 2};
  Batch batch = ds->get_batch(indices);
  REQUIRE(batch.inputs.shape() == Shape{4, 1, kRows, kCols});
  REQUIRE(batch.targets.shape() == Shape{4});
  REQUIRE(batch.targets.dtype() == DType::i64);
  auto inputs = batch.inputs.to_vector<float>();
  auto targets = batch.targets.to_vector<std::int64_t>();
  for (std::size_t i = 0; i < indices.size(); ++i) {
    auto idx = static_cast<std::size_t>(indices[i]);
    CHECK(targets[i] == kLabels[idx]);
    for (std::size_t k = 0; k < kRows * kCols; ++k)
      CHECK(inputs[i * kRows * kCols + k] == Approx(expected_pixel(idx, k, 0.2860, 0.3530)).margin(1e-6));
  }
  CHECK(ds->get_batch({}).inputs.shape() == Shape{0, 1, kRows, kCols});
  require_error([&] { ds->get_batch({1, 5}); }, {"MnistDataset::get_batch", "index 5", "5 examples"});
  require_error([&] { ds->get(-1); }, {"MnistDataset::get", "index -1"});
}

TEST_CASE("MnistDataset reports missing directories and files", "[cpu][data]") {
  TempDir dir;
  require_error([&] { MnistDataset::load(dir / "nope", MnistDataset::Split::Train); }, {"nope", "does not exist"});
  write_file(dir / "a-file", "x");
  require_error([&] { MnistDataset::load(dir / "a-file", MnistDataset::Split::Train); }, {"a-file", "not a directory"});
  require_error([&] { MnistDataset::load(dir.path(), MnistDataset::Split::Train); },
                {"'train-images-idx3-ubyte'", "'train-images-idx3-ubyte.gz'"});
  write_file(dir / "train-images-idx3-ubyte", idx_images(kCount, kRows, kCols, sample_pixels()));
  require_error([&] { MnistDataset::load(dir.path(), MnistDataset::Split::Train); },
                {"'train-labels-idx1-ubyte'", "'train-labels-idx1-ubyte.gz'"});
  require_error([&] { MnistDataset::load(dir.path(), MnistDataset::Split::Train, {.mean = 0.f, .std = 0.f}); },
                {"positive finite std"});
}

TEST_CASE("MnistDataset rejects malformed image files", "[cpu][data]") {
  TempDir dir;
  write_file(dir / "train-labels-idx1-ubyte", idx_labels(kLabels));
  const auto images = dir / "train-images-idx3-ubyte";
  auto load = [&] { MnistDataset::load(dir.path(), MnistDataset::Split::Train); };

  write_file(images, be32(0x803) + be32(5));
  require_error(load, {"train-images-idx3-ubyte'", "16-byte header", "0x00000803", "holds only 8 bytes"});
  write_file(images, idx_images(kCount, kRows, kCols, sample_pixels(), 0x801));
  require_error(load, {"train-images-idx3-ubyte'", "wrong magic number 0x00000801", "expected 0x00000803"});
  write_file(images, idx_images(kCount, 0, kCols, {}));
  require_error(load, {"train-images-idx3-ubyte'", "5 images of 0x4", "1..4096 rows and columns"});
  write_file(images, idx_images(kCount, kRows, 100000, {}));
  require_error(load, {"train-images-idx3-ubyte'", "3x100000"});
  write_file(images, idx_images(0, kRows, kCols, {}));
  require_error(load, {"train-images-idx3-ubyte'", "0 images"});
  write_file(images, idx_images(kCount, kRows, kCols, sample_pixels(kCount - 1)));
  require_error(load, {"train-images-idx3-ubyte'", "header promises 5 images of 3x4 = 60 bytes but the file holds 48"});
  write_file(images, idx_images(kCount, kRows, kCols, sample_pixels(kCount + 1)));
  require_error(load, {"train-images-idx3-ubyte'", "= 60 bytes but the file holds 72"});
}

TEST_CASE("MnistDataset rejects malformed label files and mismatched counts", "[cpu][data]") {
  TempDir dir;
  write_file(dir / "train-images-idx3-ubyte", idx_images(kCount, kRows, kCols, sample_pixels()));
  const auto labels = dir / "train-labels-idx1-ubyte";
  auto load = [&] { MnistDataset::load(dir.path(), MnistDataset::Split::Train); };

  write_file(labels, be32(0x801));
  require_error(load, {"train-labels-idx1-ubyte'", "8-byte header", "0x00000801", "holds only 4 bytes"});
  write_file(labels, idx_labels(kLabels, 0x803));
  require_error(load, {"train-labels-idx1-ubyte'", "wrong magic number 0x00000803", "expected 0x00000801"});
  write_file(labels, be32(0x801) + be32(6) + "\1\2\3");
  require_error(load, {"train-labels-idx1-ubyte'", "header promises 6 labels", "file holds 3"});
  write_file(labels, idx_labels({1, 2, 3, 4}));
  require_error(load, {"train-images-idx3-ubyte' holds 5 images", "train-labels-idx1-ubyte' holds 4 labels"});
  write_file(labels, idx_labels({1, 2, 10, 4, 5}));
  require_error(load, {"train-labels-idx1-ubyte'", "label 10 at index 2 is out of range", "0..9"});
}

TEST_CASE("MnistDataset rejects truncated, corrupt and mislabelled gzip files", "[cpu][data]") {
  TempDir dir;
  write_file(dir / "train-labels-idx1-ubyte", idx_labels(kLabels));
  const auto images = dir / "train-images-idx3-ubyte.gz";
  auto load = [&] { MnistDataset::load(dir.path(), MnistDataset::Split::Train); };
  // Incompressible-looking content keeps the deflate stream long enough to cut and damage.
  std::vector<std::uint8_t> pixels(kCount * kRows * kCols);
  for (std::size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<std::uint8_t>((k * k * 2654435761u) >> 7);
  write_gzip(images, idx_images(kCount, kRows, kCols, pixels));
  const std::string good = dtrain::test::read_file(images);

  write_file(images, good.substr(0, good.size() / 2));
  require_error(load, {"train-images-idx3-ubyte.gz'", "truncated or corrupt gzip", "unexpected end of file"});
  write_file(images, good.substr(0, good.size() - 4));  // data complete, length trailer cut
  require_error(load, {"train-images-idx3-ubyte.gz'", "gzip"});
  std::string corrupt = good;
  corrupt[corrupt.size() - 6] ^= 0x5a;  // inside the CRC-32 trailer
  write_file(images, corrupt);
  require_error(load, {"train-images-idx3-ubyte.gz'", "corrupt gzip data", "incorrect data check"});
  write_file(images, idx_images(kCount, kRows, kCols, pixels));  // plain bytes under a .gz name
  require_error(load, {"train-images-idx3-ubyte.gz'", "no gzip header"});
}

TEST_CASE("MnistDataset loads Fashion-MNIST when installed", "[cpu][data][slow]") {
  const std::filesystem::path dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir)) {
    dtrain::test::skip_test_case(dir.string() + " is absent (Debian package dataset-fashion-mnist)");
    return;
  }
  for (auto [split, count] :
       {std::pair{MnistDataset::Split::Train, 60000}, std::pair{MnistDataset::Split::Test, 10000}}) {
    auto ds = MnistDataset::load(dir, split);
    REQUIRE(ds->size() == count);
    REQUIRE(ds->rows() == 28);
    REQUIRE(ds->cols() == 28);
    // Fashion-MNIST is balanced, and the default statistics are its own: the normalized
    // pixels have mean ~0 and standard deviation ~1.
    std::vector<std::int64_t> per_class(10, 0);
    double sum = 0, sum_sq = 0;
    const std::int64_t chunk = 5000;
    for (std::int64_t begin = 0; begin < count; begin += chunk) {
      std::vector<std::int64_t> indices(chunk);
      for (std::int64_t i = 0; i < chunk; ++i) indices[static_cast<std::size_t>(i)] = begin + i;
      Batch batch = ds->get_batch(indices);
      for (auto label : batch.targets.to_vector<std::int64_t>()) {
        REQUIRE(label >= 0);
        REQUIRE(label < 10);
        ++per_class[static_cast<std::size_t>(label)];
      }
      const float* x = batch.inputs.data<float>();
      for (std::int64_t k = 0; k < batch.inputs.numel(); ++k) {
        sum += x[k];
        sum_sq += double{x[k]} * x[k];
      }
    }
    for (auto n : per_class) CHECK(n == count / 10);
    const double n = double(count) * 28 * 28, mean = sum / n;
    if (split == MnistDataset::Split::Train) {
      CHECK(std::abs(mean) < 0.001);
      CHECK(std::sqrt(sum_sq / n - mean * mean) == Approx(1.0).margin(0.001));
    }
  }
}
