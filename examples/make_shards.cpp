// dtrain-make-shards SRC OUT: packs an image class-folder tree (SRC/train/<class>/<file>,
// SRC/val/<class>/<file>) into WebDataset-style tar shards, OUT/train/shard-000000.tar, ...
// and OUT/val/..., each sample a "<key>.jpg" member (the file's bytes, unchanged: nothing is
// decoded or re-encoded) and a "<key>.cls" member (its label as decimal text), with
// OUT/<split>/classes.txt naming the labels and OUT/<split>/shards.txt the sample counts.
// Train with `train_imagenet --shards OUT`.
#include "dtrain/core/error.h"
#include "dtrain/data/image_folder_index.h"
#include "dtrain/data/tar_shards.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
using dtrain::data::ImageFolderIndex;

struct Config {
  std::string src;
  std::string out;
  std::string shard_size = "256MB";
  std::uint64_t seed = 1;
  std::string prefix = "shard";
  bool allow_empty_classes = false;
};

std::vector<std::uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  DTRAIN_CHECK(in.is_open(), "cannot open '{}'", path.string());
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DTRAIN_CHECK(!in.bad(), "cannot read '{}'", path.string());
  return bytes;
}

// Fisher-Yates with our own index draws: std::shuffle's algorithm is left to the standard
// library, and the same seed must give the same shards everywhere.
void shuffle(std::vector<std::size_t>& order, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
}

// An empty class folder is usually a copy that failed, so it is an error unless the user
// says it is expected (a subset such as dtrain-mnist-to-images --limit-train writes): the
// class then keeps its label, with no samples.
ImageFolderIndex index_split(const fs::path& dir, const std::vector<std::string>& classes, bool allow_empty) {
  ImageFolderIndex index = dtrain::data::index_image_folder(dir, classes);
  if (!index.empty_classes.empty()) {
    const std::string names = fmt::format("'{}'", fmt::join(index.empty_classes, "', '"));
    DTRAIN_CHECK(allow_empty,
                 "'{}': class folder(s) {} hold no files (--allow-empty-classes keeps them as classes "
                 "without samples)",
                 dir.string(), names);
    fmt::print("{}: class folder(s) {} hold no files\n", dir.string(), names);
  }
  DTRAIN_CHECK(!index.entries.empty(), "'{}' holds no files", dir.string());
  return index;
}

// Writes one split's samples into `out` and prints its summary line.
void pack_split(const std::string& name, const ImageFolderIndex& index, dtrain::data::TarShardWriter& writer,
                const fs::path& out, const Config& c) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::size_t> order(index.entries.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  // The training loader mixes samples only within its shuffle buffer (a window of a few
  // thousand as it streams the shards), so a class-sorted order would reach it as long runs
  // of one class: the shards themselves must already be in a random order. Validation is
  // mixed too, so that its first N samples (train_imagenet --limit-test) span the classes.
  shuffle(order, c.seed);

  dtrain::data::ShardSample sample{"", {{"jpg", {}}, {"cls", {}}}};
  for (std::size_t position = 0; position < order.size(); ++position) {
    const ImageFolderIndex::Entry& entry = index.entries[order[position]];
    const std::string label = std::to_string(entry.label);
    sample.key = fmt::format("{:09d}", position);
    sample.members[0].bytes = read_bytes(index.root / entry.path);
    sample.members[1].bytes.assign(label.begin(), label.end());
    writer.write(sample);
  }
  const std::vector<dtrain::data::ShardInfo> shards = writer.finish();
  dtrain::data::write_class_list(out / "classes.txt", index.classes);

  std::int64_t bytes = 0;
  for (const auto& s : shards) bytes += s.bytes;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("{}: {} samples of {} classes in {} shard(s), {:.1f} MB, {:.2f} s -> {}\n", name, order.size(),
             index.classes.size(), shards.size(), bytes / 1e6, seconds, out.string());
}

int run(const Config& c) {
  const std::int64_t max_shard_bytes = [&] {
    try {
      return dtrain::data::parse_byte_size(c.shard_size);
    } catch (const dtrain::Error& e) {
      DTRAIN_FAIL("--shard-size: {}", e.message());
    }
  }();
  const fs::path src(c.src), out(c.out);
  DTRAIN_CHECK(fs::is_directory(src), "SRC '{}' is not a directory", c.src);
  const fs::path train = src / "train", val = src / "val";
  const bool has_train = fs::is_directory(train), has_val = fs::is_directory(val);
  DTRAIN_CHECK(has_train || has_val, "SRC '{}' has neither a train nor a val folder of class folders", c.src);

  // Both splits are indexed, and both writers made (they refuse folders that already hold
  // shards), before anything is written: a bad tree or output folder leaves no shards.
  std::vector<std::string> classes;
  ImageFolderIndex train_index, val_index;
  if (has_train) {
    train_index = index_split(train, {}, c.allow_empty_classes);
    classes = train_index.classes;  // validation labels follow the training classes
  }
  if (has_val) val_index = index_split(val, classes, c.allow_empty_classes);
  std::optional<dtrain::data::TarShardWriter> train_writer, val_writer;
  if (has_train) train_writer.emplace(out / "train", max_shard_bytes, c.prefix);
  if (has_val) val_writer.emplace(out / "val", max_shard_bytes, c.prefix);
  if (has_train) pack_split("train", train_index, *train_writer, out / "train", c);
  if (has_val) pack_split("val", val_index, *val_writer, out / "val", c);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Pack an image class-folder tree (SRC/train/<class>/*, SRC/val/<class>/*) into WebDataset-style tar shards "
      "(OUT/train/shard-000000.tar, ..., OUT/val/...) for train_imagenet --shards OUT. Files are stored unchanged; "
      "samples in a random order (--seed).",
      "dtrain-make-shards"};
  Config c;
  app.add_option("SRC", c.src, "the tree to pack: SRC/train and/or SRC/val, each holding one folder per class")
      ->required();
  app.add_option("OUT", c.out, "where to write OUT/train and OUT/val (which must not already hold shards)")->required();
  app.add_option("--shard-size", c.shard_size, "largest shard, e.g. 256MB, 1GB, 64MiB (a larger sample gets its own)")
      ->capture_default_str();
  app.add_option("--seed", c.seed, "seed of the training samples' order")->capture_default_str();
  app.add_option("--prefix", c.prefix, "shard file names: <prefix>-000000.tar, ...")->capture_default_str();
  app.add_flag("--allow-empty-classes", c.allow_empty_classes,
               "keep empty class folders as classes without samples instead of failing");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(c);
  } catch (const dtrain::Error& e) {
    fmt::print(stderr, "dtrain-make-shards: error: {}\n", e.message());
  } catch (const std::exception& e) {
    fmt::print(stderr, "dtrain-make-shards: error: {}\n", e.what());
  }
  return 1;
}
