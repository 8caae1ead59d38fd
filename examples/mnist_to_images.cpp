// dtrain-mnist-to-images IDX_DIR OUT: writes MNIST-format data (such as Fashion-MNIST)
// as an image class-folder tree of 28x28 grayscale JPEGs, OUT/train/<label>/<index>.jpg from
// the training set and OUT/val/<label>/<index>.jpg from the test set, so that the ImageNet
// trainer can run on real images here. Class folders are "0".."9": sorted by name they are
// in label order.
#include "dtrain/core/error.h"
#include "dtrain/data/image.h"
#include "dtrain/data/jpeg.h"
#include "dtrain/data/mnist.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;
using dtrain::data::MnistDataset;

struct Config {
  std::string idx_dir = "/usr/share/datasets/fashion-mnist";  // the example in --help
  std::string out;
  int quality = 95;
  std::int64_t limit_train = 0;  // 0: all
  std::int64_t limit_test = 0;
};

void write_bytes(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  DTRAIN_CHECK(out.good(), "cannot write '{}'", path.string());
}

// Writes the first `limit` examples (all when 0) of one split; returns how many.
std::int64_t convert_split(const fs::path& idx_dir, MnistDataset::Split split, std::int64_t limit, const fs::path& out,
                           int quality) {
  // mean 0, std 1: the inputs are pixel / 255, which round back to the bytes exactly.
  const auto dataset = MnistDataset::load(idx_dir, split, dtrain::data::MnistOptions{.mean = 0, .std = 1});
  const std::int64_t count = limit > 0 ? std::min(limit, dataset->size()) : dataset->size();
  // Every class gets its folder, even one a --limit leaves empty: labels are folder positions.
  for (std::int64_t label = 0; label < dataset->num_classes(); ++label)
    fs::create_directories(out / std::to_string(label));
  auto image = dtrain::data::Image::blank(static_cast<int>(dataset->cols()), static_cast<int>(dataset->rows()));
  for (std::int64_t i = 0; i < count; ++i) {
    const auto example = dataset->get(i);
    const float* pixels = example.input.data<float>();
    for (std::size_t p = 0; p * 3 < image.pixels.size(); ++p) {
      const auto v = static_cast<std::uint8_t>(std::clamp(std::lround(pixels[p] * 255.0f), 0L, 255L));
      image.pixels[3 * p] = image.pixels[3 * p + 1] = image.pixels[3 * p + 2] = v;
    }
    const std::int64_t label = example.target.item<std::int64_t>();
    write_bytes(out / std::to_string(label) / fmt::format("{:05d}.jpg", i),
                dtrain::data::encode_jpeg(image, quality, /*grayscale=*/true));
  }
  return count;
}

int run(const Config& c) {
  const fs::path idx_dir(c.idx_dir), out(c.out);
  DTRAIN_CHECK(fs::is_directory(idx_dir), "IDX_DIR '{}' is not a directory{}", c.idx_dir,
               c.idx_dir == Config{}.idx_dir ? " (Debian's dataset-fashion-mnist package installs it)" : "");
  // Files left from an earlier, larger conversion would join this one's classes.
  for (const char* split : {"train", "val"}) {
    const fs::path dir = out / split;
    DTRAIN_CHECK(!fs::exists(dir) || fs::is_empty(dir),
                 "'{}' already exists and is not empty: remove it or choose another OUT", dir.string());
  }
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t train =
      convert_split(idx_dir, MnistDataset::Split::Train, c.limit_train, out / "train", c.quality);
  const std::int64_t val = convert_split(idx_dir, MnistDataset::Split::Test, c.limit_test, out / "val", c.quality);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("wrote {} training and {} validation images (grayscale JPEG, quality {}) under {} in {:.1f} s\n", train,
             val, c.quality, out.string(), seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Write MNIST-format IDX files (MNIST, Fashion-MNIST, ...) as a class-folder tree of grayscale JPEGs: "
      "OUT/train/<label>/<index>.jpg from the training set, OUT/val/<label>/<index>.jpg from the test set. "
      "Train on it with train_imagenet --data OUT, or pack it into tar shards first with "
      "dtrain-make-shards OUT SHARDS (with --allow-empty-classes when a --limit leaves a class without images).",
      "dtrain-mnist-to-images"};
  Config c;
  app.add_option("IDX_DIR", c.idx_dir,
                 "folder of {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz], e.g. " + Config{}.idx_dir +
                     " (Debian's dataset-fashion-mnist)")
      ->required();
  app.add_option("OUT", c.out, "where to write OUT/train and OUT/val")->required();
  app.add_option("--quality", c.quality, "JPEG quality")->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--limit-train", c.limit_train, "convert the first N training examples only")
      ->check(CLI::PositiveNumber);
  app.add_option("--limit-test", c.limit_test, "convert the first N test examples only")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(c);
  } catch (const dtrain::Error& e) {
    fmt::print(stderr, "dtrain-mnist-to-images: error: {}\n", e.message());
  } catch (const std::exception& e) {
    fmt::print(stderr, "dtrain-mnist-to-images: error: {}\n", e.what());
  }
  return 1;
}
