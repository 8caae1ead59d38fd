// ImageFolder (with its cached index) and ShardedImages: labels, transforms applied,
// the bad-image policies, and the order in which shards are dealt and streamed.
#include "dtrain/data/image_dataset.h"
#include "dtrain/data/jpeg.h"
#include "dtrain/data/sampler.h"
#include "dtrain/data/sharded_images.h"
#include "dtrain/data/tar_shards.h"
#include "data/idx_files.h"
#include "support/test_support.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

using namespace dtrain;
using dtrain::test::require_error;
using dtrain::test::TempDir;
namespace fs = std::filesystem;

namespace {

// A solid colour per class: the decoded, normalized pixels tell the label.
constexpr std::uint8_t kColours[3][3] = {{220, 30, 30}, {30, 220, 30}, {30, 30, 220}};

std::vector<std::uint8_t> jpeg_of(int label, int width = 40, int height = 30) {
  data::Image image = data::Image::blank(width, height);
  for (std::size_t i = 0; i < image.pixels.size(); i += 3) {
    for (int c = 0; c < 3; ++c) image.pixels[i + static_cast<std::size_t>(c)] = kColours[label][c];
  }
  return data::encode_jpeg(image, 95);
}

void write_bytes(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

// root/<split>/{red,green,blue}/<i>.jpg, `per_class` images each.
void make_tree(const fs::path& split, int per_class) {
  const char* names[] = {"red", "green", "blue"};
  for (int label = 0; label < 3; ++label) {
    for (int i = 0; i < per_class; ++i) write_bytes(split / names[label] / (std::to_string(i) + ".jpg"), jpeg_of(label));
  }
}

data::ImageDatasetOptions small_images(data::BadImagePolicy policy = data::BadImagePolicy::Fail) {
  data::ImageDatasetOptions o{.transform = {}, .seed = 5, .bad_images = policy};
  o.transform.size = 16;
  o.transform.mean[0] = o.transform.mean[1] = o.transform.mean[2] = 0;
  o.transform.std[0] = o.transform.std[1] = o.transform.std[2] = 1;
  return o;
}

// The colour a (3, S, S) normalized input shows most: its label under kColours.
std::int64_t dominant_channel(const Tensor& inputs, std::int64_t row) {
  const Tensor x = inputs.select(0, row).contiguous();
  const float* p = x.data<float>();
  const std::int64_t plane = x.size(1) * x.size(2);
  double sums[3] = {0, 0, 0};
  for (int c = 0; c < 3; ++c) {
    for (std::int64_t i = 0; i < plane; ++i) sums[c] += p[c * plane + i];
  }
  return std::max_element(sums, sums + 3) - sums;
}

}  // namespace

// Dates the folders of `root` an hour back, as if the tree had been there a while.
static void age(const fs::path& root) {
  const auto past = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(root, past);
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) fs::last_write_time(entry.path(), past);
  }
}

TEST_CASE("index_image_folder sorts classes and files and caches the list", "[cpu][data]") {
  TempDir dir;
  make_tree(dir / "train", 3);
  // A tree modified just now is listed but not cached: a change within the same timestamp
  // tick would go unseen.
  data::index_image_folder(dir / "train");
  CHECK_FALSE(fs::exists(dir / "train" / ".dtrain-index"));
  age(dir / "train");
  const auto index = data::index_image_folder(dir / "train");
  CHECK(index.classes == std::vector<std::string>{"blue", "green", "red"});
  REQUIRE(index.entries.size() == 9);
  CHECK(index.entries[0].path == "blue/0.jpg");
  CHECK(index.entries[0].label == 0);
  CHECK(index.entries[8].path == "red/2.jpg");
  CHECK(index.entries[8].label == 2);
  CHECK(fs::exists(dir / "train" / ".dtrain-index"));
  // The cached list is what is read (checked by tampering with it)...
  {
    std::ifstream in(dir / "train" / ".dtrain-index");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    text.replace(text.rfind("red/2.jpg"), 9, "red/X.jpg");
    std::ofstream(dir / "train" / ".dtrain-index", std::ios::trunc) << text;
  }
  CHECK(data::index_image_folder(dir / "train").entries[8].path == "red/X.jpg");
  // ...while the folders are unchanged; a changed one is listed again.
  write_bytes(dir / "train" / "red" / "9.jpg", jpeg_of(2));
  const auto relisted = data::index_image_folder(dir / "train");
  CHECK(relisted.entries.size() == 10);
  CHECK(relisted.entries[8].path == "red/2.jpg");
  // A validation split takes the training classes; a class it lacks just has no samples.
  make_tree(dir / "val", 1);
  fs::remove_all(dir / "val" / "green");
  const auto val = data::index_image_folder(dir / "val", index.classes);
  CHECK(val.classes == index.classes);
  CHECK(val.empty_classes == std::vector<std::string>{"green"});
  CHECK(val.entries[1].label == 2);
  fs::create_directories(dir / "val" / "purple");
  require_error([&] { data::index_image_folder(dir / "val", index.classes); }, {"'purple'", "not one of the 3"});
  require_error([&] { data::index_image_folder(dir / "nowhere"); }, {"nowhere", "not a directory"});
  fs::create_directories(dir / "bare");
  require_error([&] { data::index_image_folder(dir / "bare"); }, {"bare", "no class folders"});
}

TEST_CASE("ImageFolder decodes, transforms and labels its images", "[cpu][data]") {
  TempDir dir;
  make_tree(dir / "train", 2);
  auto folder = data::ImageFolder::open(dir / "train", small_images());
  REQUIRE(folder->size() == 6);
  const data::Batch b = folder->get_epoch_batch({0, 2, 4, 5}, 0);
  CHECK(b.inputs.shape() == Shape{4, 3, 16, 16});
  CHECK(b.targets.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 2});
  // Classes sorted: blue (channel 2), green (1), red (0).
  CHECK(dominant_channel(b.inputs, 0) == 2);
  CHECK(dominant_channel(b.inputs, 1) == 1);
  CHECK(dominant_channel(b.inputs, 2) == 0);
  // The same (seed, epoch, index) gives the same crop on any call.
  const data::Batch again = folder->get_epoch_batch({5}, 3);
  CHECK(max_abs_diff(again.inputs, folder->get_epoch_batch({5}, 3).inputs) == 0);
}

TEST_CASE("ImageFolder's bad images fail naming the file, or are skipped and counted", "[cpu][data]") {
  TempDir dir;
  make_tree(dir / "train", 2);
  const fs::path red = dir / "train" / "red";
  std::vector<std::uint8_t> truncated = jpeg_of(0, 64, 64);
  truncated.resize(truncated.size() / 2);
  write_bytes(red / "a_truncated.jpg", truncated);
  write_bytes(red / "b_notes.txt", {'h', 'i', '\n'});
  fs::create_symlink(dir / "nowhere.jpg", red / "c_missing.jpg");
  fs::create_directories(dir / "train" / "yellow");

  require_error([&] { data::ImageFolder::open(dir / "train", small_images()); }, {"yellow", "hold no images"});
  fs::remove(dir / "train" / "yellow");
  auto strict = data::ImageFolder::open(dir / "train", small_images());
  // Sorted: blue 0-1, green 2-3, red: 0.jpg 4, 1.jpg 5, a_truncated 6, b_notes 7, c_missing 8.
  REQUIRE(strict->size() == 9);
  require_error([&] { strict->get_epoch_batch({6}, 0); }, {"a_truncated.jpg"});
  require_error([&] { strict->get_epoch_batch({7}, 0); }, {"b_notes.txt", "not a JPEG"});
  require_error([&] { strict->get_epoch_batch({8}, 0); }, {"c_missing.jpg", "cannot open"});

  fs::create_directories(dir / "train" / "yellow");
  auto lenient = data::ImageFolder::open(dir / "train", small_images(data::BadImagePolicy::Skip));
  CHECK(lenient->classes().size() == 4);  // the empty class keeps its label
  const data::Batch b = lenient->get_epoch_batch({6, 7, 8, 4, 0}, 0);
  CHECK(lenient->bad_samples_skipped() == 3);
  // The bad rows hold good samples of the same batch: the batch keeps its shape.
  CHECK(b.inputs.shape() == Shape{5, 3, 16, 16});
  for (auto label : b.targets.to_vector<std::int64_t>()) CHECK((label == 2 || label == 0));
  require_error([&] { lenient->get_epoch_batch({6, 7}, 0); }, {"every one of the 2 samples", "a_truncated.jpg"});
}

TEST_CASE("sharded_epoch_order deals whole shards, equal lengths, through a shuffle buffer", "[cpu][data]") {
  const std::vector<std::int64_t> counts = {10, 10, 10, 10, 7};  // samples 0-46
  std::set<std::int64_t> per_rank[2];
  for (int rank = 0; rank < 2; ++rank) {
    const auto order = data::sharded_epoch_order(counts, rank, 2, 1, 0, 4);
    CHECK(order.size() == 24);  // ceil(47 / 2)
    per_rank[rank].insert(order.begin(), order.end());
    CHECK(order == data::sharded_epoch_order(counts, rank, 2, 1, 0, 4));  // reproducible
    CHECK(order != data::sharded_epoch_order(counts, rank, 2, 1, 1, 4));  // reshuffled per epoch
  }
  // Whole shards per rank: the ranks' samples are disjoint, and together cover all but the
  // tail that the rank with more shards stops before (one with fewer repeats its own).
  for (auto i : per_rank[0]) CHECK(per_rank[1].count(i) == 0);
  CHECK(per_rank[0].size() + per_rank[1].size() >= 47 - 10);
  for (const auto& samples : per_rank) {
    std::set<std::int64_t> shards;
    for (auto i : samples) shards.insert(i / 10);
    CHECK((shards.size() == 2 || shards.size() == 3));
  }

  // A buffer of 1 streams the rank's shards in order; each shard's samples stay together.
  const auto streamed = data::sharded_epoch_order(counts, 0, 2, 1, 0, 1);
  for (std::size_t i = 1; i < streamed.size(); ++i) {
    if (streamed[i] / 10 == streamed[i - 1] / 10) CHECK(streamed[i] == streamed[i - 1] + 1);
  }
  // With a buffer of 4, a sample is emitted at most 4 places before its stream position...
  const auto buffered = data::sharded_epoch_order(counts, 0, 2, 1, 0, 4);
  std::map<std::int64_t, std::size_t> stream_position;
  for (std::size_t i = 0; i < streamed.size(); ++i) stream_position.emplace(streamed[i], i);
  for (std::size_t i = 0; i < buffered.size(); ++i) CHECK(stream_position.at(buffered[i]) <= i + 4);
  // ...and is a permutation of the stream.
  auto a = streamed, b = buffered;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  CHECK(a == b);
  require_error([&] { data::sharded_epoch_order({5, 5}, 0, 3, 1, 0, 4); }, {"2 shard(s) for 3 ranks"});
}

TEST_CASE("ShardedImages serves shards in any order and applies the bad-image policy", "[cpu][data]") {
  TempDir dir;
  const fs::path out = dir / "train";
  fs::create_directories(out);
  {
    data::TarShardWriter writer(out, 2500);  // a few samples per shard
    for (int i = 0; i < 12; ++i) {
      data::ShardSample s{fmt::format("{:09d}", i), {{"jpg", jpeg_of(i % 3)}, {"cls", {std::uint8_t('0' + i % 3)}}}};
      if (i == 7) s.members[0].bytes.resize(s.members[0].bytes.size() / 2);  // a truncated JPEG
      if (i == 9) s.members.pop_back();                                     // no label
      writer.write(s);
    }
    writer.finish();
  }
  std::ofstream(out / "classes.txt") << "red\ngreen\nblue\n";
  data::ShardedImagesOptions options{.images = small_images(), .shuffle_buffer = 3};
  auto strict = data::ShardedImages::open(out, options);
  REQUIRE(strict->size() == 12);
  REQUIRE(strict->num_shards() >= 2);
  CHECK(strict->classes() == std::vector<std::string>{"red", "green", "blue"});
  // Forward, backward and across shards: every sample comes back with its label.
  const data::Batch b = strict->get_epoch_batch({11, 0, 5, 1, 10, 2}, 0);
  CHECK(b.targets.to_vector<std::int64_t>() == std::vector<std::int64_t>{2, 0, 2, 1, 1, 2});
  CHECK(dominant_channel(b.inputs, 0) == 2);
  CHECK(dominant_channel(b.inputs, 3) == 1);
  require_error([&] { strict->get_epoch_batch({7}, 0); }, {"000000007", ".tar"});
  require_error([&] { strict->get_epoch_batch({9}, 0); }, {"000000009", "no .cls member"});

  options.images.bad_images = data::BadImagePolicy::Skip;
  auto lenient = data::ShardedImages::open(out, options);
  const auto sampler = lenient->rank_sampler(0, 1, 1, true);
  const auto order = sampler->indices(0);
  CHECK(order.size() == 12);
  CHECK(lenient->get_epoch_batch(order, 0).inputs.shape() == Shape{12, 3, 16, 16});
  CHECK(lenient->bad_samples_skipped() == 2);
  // Evaluation deals the shards out unshuffled and unpadded: the ranks together read each
  // sample once.
  std::vector<std::int64_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    const auto part = lenient->rank_sampler(rank, 2, 1, false)->indices(0);
    seen.insert(seen.end(), part.begin(), part.end());
  }
  std::sort(seen.begin(), seen.end());
  CHECK(seen.size() == 12);
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
  require_error([&] { data::ShardedImages::open(dir / "empty", options); }, {"empty"});

  // A shard cut short (after its listing was written): the samples past the cut are errors
  // naming the shard, or skipped and counted.
  const fs::path last = data::list_shards(out).back().path;
  const auto listed = data::list_shards(out).back().samples;
  fs::resize_file(last, fs::file_size(last) / 2);
  options.images.bad_images = data::BadImagePolicy::Fail;
  auto cut = data::ShardedImages::open(out, options);
  std::vector<std::int64_t> tail;
  for (std::int64_t i = cut->size() - listed; i < cut->size(); ++i) tail.push_back(i);
  require_error([&] { cut->get_epoch_batch(tail, 0); }, {last.filename().string()});
  options.images.bad_images = data::BadImagePolicy::Skip;
  auto cut_lenient = data::ShardedImages::open(out, options);
  tail.push_back(0);  // a good sample: a batch of nothing but bad ones is an error
  CHECK(cut_lenient->get_epoch_batch(tail, 0).inputs.size(0) == listed + 1);
  CHECK(cut_lenient->bad_samples_skipped() >= 1);
  fs::remove(out / "classes.txt");
  require_error([&] { data::ShardedImages::open(out, options); }, {"classes.txt"});
}
