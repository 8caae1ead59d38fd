// make_image_tree OUT [--bad] [--empty-class]: writes a small ImageFolder tree for the
// train_imagenet tests, OUT/train/<class>/*.jpg and OUT/val/<class>/*.jpg, 4 classes
// of 48 + 12 JPEGs whose colour (red, green, blue, yellow, with noise, and a random size
// from 36 to 64 pixels a side) is the learnable signal. --bad adds a corrupt JPEG, a
// truncated one, a text file and a dangling link to train/c0; --empty-class adds an empty
// class folder train/c9.
#include "dtrain/data/jpeg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace {

namespace fs = std::filesystem;
using dtrain::data::Image;

constexpr int kClasses = 4;
constexpr int kTrainPerClass = 48;
constexpr int kValPerClass = 12;
constexpr int kColours[kClasses][3] = {{200, 40, 40}, {40, 190, 60}, {50, 60, 210}, {210, 200, 40}};

void write(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::uint8_t> image_of_class(int label, std::mt19937& rng) {
  std::uniform_int_distribution<int> side(36, 64), noise(-40, 40);
  Image image = Image::blank(side(rng), side(rng));
  for (int y = 0; y < image.height; ++y) {
    std::uint8_t* row = image.row(y);
    for (int x = 0; x < image.width; ++x) {
      for (int c = 0; c < 3; ++c) row[3 * x + c] = static_cast<std::uint8_t>(std::clamp(kColours[label][c] + noise(rng), 0, 255));
    }
  }
  return dtrain::data::encode_jpeg(image, 90);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_image_tree OUT [--bad] [--empty-class]\n");
    return 2;
  }
  const fs::path out = argv[1];
  bool bad = false, empty_class = false;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--bad") bad = true;
    else if (flag == "--empty-class") empty_class = true;
    else {
      std::fprintf(stderr, "make_image_tree: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  fs::remove_all(out);
  std::mt19937 rng(7);
  for (const auto& [split, count] : {std::pair{"train", kTrainPerClass}, std::pair{"val", kValPerClass}}) {
    for (int label = 0; label < kClasses; ++label) {
      const fs::path dir = out / split / fmt::format("c{}", label);
      fs::create_directories(dir);
      for (int i = 0; i < count; ++i) write(dir / (std::to_string(i) + ".jpg"), image_of_class(label, rng));
    }
  }
  if (bad) {
    const fs::path dir = out / "train" / "c0";
    std::vector<std::uint8_t> corrupt = {0xFF, 0xD8, 0xFF, 0xE0};
    for (int i = 0; i < 200; ++i) corrupt.push_back(static_cast<std::uint8_t>(rng()));
    write(dir / "corrupt.jpg", corrupt);
    std::vector<std::uint8_t> truncated = image_of_class(0, rng);
    truncated.resize(truncated.size() / 2);
    write(dir / "truncated.jpg", truncated);
    std::ofstream(dir / "notes.txt") << "not an image\n";
    fs::create_symlink(out / "nowhere.jpg", dir / "missing.jpg");
  }
  if (empty_class) fs::create_directories(out / "train" / "c9");
  std::printf("make_image_tree: %d classes, %d train and %d val images in %s%s\n", kClasses,
              kClasses * kTrainPerClass, kClasses * kValPerClass, out.c_str(), bad ? " (plus 4 bad files)" : "");
  return 0;
}
