// bench_loader: images/s per loader thread of the ImageNet training pipeline (JPEG decode,
// RandomResizedCrop to 224, horizontal flip, normalization to f32 CHW), the figure
// bench/peers/torchvision_loader.py reports for torchvision on the same JPEGs.
//
//   bench_loader --images ROOT [--shards DIR] [--workers 1] [--batch 32] [--json]
//
// Cases, each on ROOT/train (class folders) or DIR/train (dtrain-make-shards' tar shards):
//   folder   ImageFolder through the DataLoader, shuffled, as train_imagenet --data reads it;
//   shards   ShardedImages through the DataLoader with its rank sampler (shards streamed
//            through the shuffle buffer), as train_imagenet --shards reads them;
//   memory   the same per-sample pipeline (load_image) on JPEGs already in memory, on the
//            calling thread: what the loader cases cost without file reads and batching;
//   decode   full-size decodes of those JPEGs (no DCT scaling, no transforms), on the
//            calling thread: the codec's rate, for context.
// Each loader case makes one untimed pass first (it fills the page cache and the shard
// reader's buffers), then times --passes passes, each a fresh epoch; the consumer only takes
// the batches. images/s per thread is images / seconds / workers. Intra-op threads are 1.
#include "dtrain/core/parallel.h"
#include "dtrain/data/dataloader.h"
#include "dtrain/data/image_dataset.h"
#include "dtrain/data/image_folder_index.h"
#include "dtrain/data/jpeg.h"
#include "dtrain/data/sharded_images.h"

#include "bench_stats.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <jpeglib.h>  // after <cstdio>, which it needs: LIBJPEG_TURBO_VERSION_NUMBER

namespace {

using namespace dtrain;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string images;
  std::string shards;
  std::vector<std::string> cases;  // empty: every case (shards only with --shards)
  std::int64_t batch = 32;
  int workers = 1;
  int size = 224;
  int passes = 1;
  std::uint64_t seed = 1;
  bool json = false;
};

struct Result {
  std::string name;
  std::int64_t images = 0;
  double seconds = 0;
  int threads = 1;  // threads doing the work
};

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::vector<std::uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  DTRAIN_CHECK(in.is_open(), "bench_loader: cannot open '{}'", path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

data::ImageDatasetOptions image_options(const Config& c) {
  data::ImageDatasetOptions o{.transform = {}, .seed = c.seed};
  o.transform.size = c.size;
  return o;
}

// Untimed pass (epoch 0), then c.passes timed ones (epochs 1, 2, ...).
Result loader_case(const Config& c, const std::string& name, std::shared_ptr<const data::Dataset> dataset,
                   std::shared_ptr<const data::Sampler> sampler) {
  const bool shuffle = sampler == nullptr;  // not in the call: the sampler argument may be moved from first
  data::DataLoader loader(std::move(dataset),
                          {.batch_size = c.batch, .shuffle = shuffle, .seed = c.seed, .workers = c.workers},
                          std::move(sampler));
  const auto pass = [&loader](std::int64_t epoch) {
    loader.set_epoch(epoch);
    std::int64_t images = 0;
    for (const data::Batch& batch : loader) images += batch.inputs.size(0);
    return images;
  };
  pass(0);
  Result r{name, 0, 0, c.workers};
  const auto start = Clock::now();
  for (int p = 1; p <= c.passes; ++p) r.images += pass(p);
  r.seconds = since(start);
  return r;
}

std::vector<std::vector<std::uint8_t>> read_all(const data::ImageFolderIndex& index) {
  std::vector<std::vector<std::uint8_t>> files;
  for (const auto& entry : index.entries) files.push_back(read_file(index.root / entry.path));
  return files;
}

// The per-sample pipeline on one thread, from memory (the loader's samples, epoch 1's draws).
Result memory_case(const Config& c, const std::vector<std::vector<std::uint8_t>>& files) {
  const data::ImageDatasetOptions o = image_options(c);
  std::vector<float> out(3 * static_cast<std::size_t>(c.size) * static_cast<std::size_t>(c.size));
  Result r{"memory", 0, 0, 1};
  const auto start = Clock::now();
  for (int p = 1; p <= c.passes; ++p) {
    for (std::size_t i = 0; i < files.size(); ++i) {
      data::SampleRng rng(o.seed, p, static_cast<std::int64_t>(i));
      data::load_image(files[i].data(), files[i].size(), "memory", o.transform, rng, out.data());
      ++r.images;
    }
  }
  r.seconds = since(start);
  return r;
}

Result decode_case(const Config& c, const std::vector<std::vector<std::uint8_t>>& files) {
  Result r{"decode", 0, 0, 1};
  std::int64_t checksum = 0;  // uses the pixels, so that no decode can be optimized away
  const auto start = Clock::now();
  for (int p = 1; p <= c.passes; ++p) {
    for (const auto& file : files) {
      const data::Image image = data::decode_jpeg(file.data(), file.size(), "decode");
      checksum += image.pixels[image.pixels.size() / 2];
      ++r.images;
    }
  }
  r.seconds = since(start);
  DTRAIN_CHECK(checksum >= 0, "bench_loader: impossible checksum {}", checksum);
  return r;
}

void report(const Config& c, const Result& r, double mean_pixels) {
  const double rate = static_cast<double>(r.images) / r.seconds;
  const double per_thread = rate / r.threads;
  if (c.json) {
    nlohmann::ordered_json j = {{"bench", "loader"},
                                {"framework", "dtrain"},
                                {"case", r.name},
                                {"images", r.images},
                                {"batch", r.name == "folder" || r.name == "shards" ? c.batch : 1},
                                {"workers", r.threads},
                                {"size", c.size},
                                {"seconds", bench::round4(r.seconds)},
                                {"images_per_s", bench::round4(rate)},
                                {"images_per_s_per_thread", bench::round4(per_thread)},
                                {"mpixels_per_s_per_thread", bench::round4(per_thread * mean_pixels / 1e6)}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{:<8}{:>8}{:>9}{:>10.2f}{:>12.1f}{:>16.1f}{:>14.1f}\n", r.name, r.images, r.threads, r.seconds, rate,
               per_thread, per_thread * mean_pixels / 1e6);
  }
  std::fflush(stdout);
}

int run(const Config& c) {
  set_num_threads(1);
  const fs::path train = fs::path(c.images) / "train";
  const data::ImageFolderIndex index = data::index_image_folder(train);
  DTRAIN_CHECK(!index.entries.empty(), "bench_loader: '{}' holds no images", train.string());

  // Read once for the in-memory cases and for the mean image size.
  const std::vector<std::vector<std::uint8_t>> files = read_all(index);
  double pixels = 0, bytes = 0;
  for (const auto& f : files) {
    const data::JpegInfo info = data::read_jpeg_info(f.data(), f.size(), "header");
    pixels += static_cast<double>(info.width) * info.height;
    bytes += static_cast<double>(f.size());
  }
  const double n = static_cast<double>(files.size());
  const std::string libjpeg = fmt::format("libjpeg-turbo {}.{}.{}", LIBJPEG_TURBO_VERSION_NUMBER / 1000000,
                                          LIBJPEG_TURBO_VERSION_NUMBER / 1000 % 1000, LIBJPEG_TURBO_VERSION_NUMBER % 1000);
  const std::string data_line = fmt::format("{} JPEGs in {} classes, {:.0f} kB and {:.2f} Mpixel on average",
                                            files.size(), index.classes.size(), bytes / n / 1e3, pixels / n / 1e6);
  if (c.json) {
    fmt::print("{}\n", nlohmann::ordered_json{{"bench", "loader"},
                                              {"machine", bench::machine_description()},
                                              {"libjpeg", libjpeg},
                                              {"data", data_line}}
                           .dump());
  } else {
    fmt::print("bench_loader: decode + RandomResizedCrop({}) + flip + normalize, batch {}, {} worker(s), {} timed "
               "pass(es) after one untimed; {}; {}; {}\n",
               c.size, c.batch, c.workers, c.passes, data_line, libjpeg, bench::machine_description());
    fmt::print("{:<8}{:>8}{:>9}{:>10}{:>12}{:>16}{:>14}\n", "case", "images", "threads", "seconds", "images/s",
               "images/s/thread", "Mpix/s/thread");
  }

  for (const std::string& name : c.cases) {
    if (name == "folder") {
      report(c, loader_case(c, name, data::ImageFolder::open(train, image_options(c)), nullptr), pixels / n);
    } else if (name == "shards") {
      DTRAIN_CHECK(!c.shards.empty(), "bench_loader: the shards case needs --shards DIR (dtrain-make-shards ROOT DIR)");
      auto shards = data::ShardedImages::open(fs::path(c.shards) / "train", {.images = image_options(c)});
      DTRAIN_CHECK(shards->size() == static_cast<std::int64_t>(files.size()),
                   "bench_loader: '{}' holds {} images but '{}' {}: shards of another tree?", c.shards, shards->size(),
                   train.string(), files.size());
      auto sampler = shards->rank_sampler(0, 1, c.seed, true);
      report(c, loader_case(c, name, std::move(shards), std::move(sampler)), pixels / n);
    } else if (name == "memory") {
      report(c, memory_case(c, files), pixels / n);
    } else if (name == "decode") {
      report(c, decode_case(c, files), pixels / n);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Images/s per loader thread of the ImageNet training pipeline on JPEG folders and tar shards",
               "bench_loader"};
  Config c;
  app.add_option("--images", c.images, "ROOT holding ROOT/train/<class>/*.jpg (bench/peers/make_loader_images.py)")
      ->required();
  app.add_option("--shards", c.shards, "DIR holding DIR/train/*.tar (dtrain-make-shards ROOT DIR)");
  app.add_option("--cases", c.cases,
                 "comma-separated, run in the order given: folder, shards, memory, decode (default: all of them, "
                 "shards when --shards is given)")
      ->delimiter(',')
      ->check(CLI::IsMember({"folder", "shards", "memory", "decode"}));
  app.add_option("--batch", c.batch, "images per batch")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--workers", c.workers, "loader threads")->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--size", c.size, "output side (RandomResizedCrop)")->check(CLI::Range(8, 4096))->capture_default_str();
  app.add_option("--passes", c.passes, "timed passes over the images per case")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--seed", c.seed, "seed of the order and the crops")->capture_default_str();
  app.add_flag("--json", c.json, "print JSON lines (the machine, then one per case) instead of a table");
  CLI11_PARSE(app, argc, argv);
  if (c.cases.empty()) {
    c.cases = {"folder", "memory", "decode"};
    if (!c.shards.empty()) c.cases.insert(c.cases.begin() + 1, "shards");
  }
  try {
    return run(c);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_loader: error: {}\n", e.what());
    return 1;
  }
}
