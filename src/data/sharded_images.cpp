#include "dtrain/data/sharded_images.h"

#include "data/image_batch.h"
#include "data/shard_stream.h"
#include "dtrain/core/error.h"
#include "dtrain/data/sampler.h"
#include "dtrain/data/tar_shards.h"

#include <fmt/ranges.h>

#include <charconv>
#include <random>

namespace dtrain::data {
namespace {

// An unbiased draw from [0, n) (std::uniform_int_distribution is implementation-defined,
// and the order must be the same everywhere).
std::uint64_t bounded(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t limit = std::mt19937_64::max() - std::mt19937_64::max() % n;
  std::uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % n;
}

std::vector<std::int64_t> prefix_sums(const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> first{0};
  for (auto c : counts) first.push_back(first.back() + c);
  return first;
}

// The samples of shards rank, rank + W, ... of `order`, concatenated.
std::vector<std::int64_t> dealt_samples(const std::vector<std::int64_t>& counts, const std::vector<std::int64_t>& order,
                                        int rank, int world_size) {
  const auto first = prefix_sums(counts);
  std::vector<std::int64_t> samples;
  for (std::size_t k = static_cast<std::size_t>(rank); k < order.size(); k += static_cast<std::size_t>(world_size)) {
    const auto s = static_cast<std::size_t>(order[k]);
    for (std::int64_t i = first[s]; i < first[s + 1]; ++i) samples.push_back(i);
  }
  return samples;
}

// Training deals whole shards, so every rank needs at least one.
void check_shard_count(const std::vector<std::int64_t>& counts, int world_size) {
  DTRAIN_CHECK(static_cast<int>(counts.size()) >= world_size,
               "{} shard(s) for {} ranks: each rank reads whole shards, so make at least {} (a smaller --shard-size)",
               counts.size(), world_size, world_size);
}

class ShardSampler final : public Sampler {
 public:
  ShardSampler(std::vector<std::int64_t> counts, int rank, int world_size, std::uint64_t seed, bool training,
               std::int64_t shuffle_buffer)
      : counts_(std::move(counts)), rank_(rank), world_size_(world_size), seed_(seed), training_(training),
        shuffle_buffer_(shuffle_buffer) {
    if (training_) {
      check_shard_count(counts_, world_size_);
      std::int64_t total = 0;
      for (auto c : counts_) total += c;
      size_ = (total + world_size_ - 1) / world_size_;
    } else {
      // The same every evaluation: the shards in their stored order, dealt out once here.
      std::vector<std::int64_t> stored(counts_.size());
      for (std::size_t s = 0; s < stored.size(); ++s) stored[s] = static_cast<std::int64_t>(s);
      evaluation_ = dealt_samples(counts_, stored, rank_, world_size_);
      size_ = static_cast<std::int64_t>(evaluation_.size());
    }
  }

  std::vector<std::int64_t> indices(std::int64_t epoch) const override {
    if (training_) return sharded_epoch_order(counts_, rank_, world_size_, seed_, epoch, shuffle_buffer_);
    return evaluation_;
  }
  std::int64_t size() const override { return size_; }

 private:
  std::vector<std::int64_t> counts_;
  int rank_, world_size_;
  std::uint64_t seed_;
  bool training_;
  std::int64_t shuffle_buffer_;
  std::vector<std::int64_t> evaluation_;  // without training: this rank's samples
  std::int64_t size_ = 0;
};

std::int64_t parse_label(const ShardSample& sample, const std::string& name, std::size_t classes) {
  const ShardMember* cls = sample.find("cls");
  DTRAIN_CHECK(cls != nullptr, "{}: no .cls member (expected the class index as text next to the image)", name);
  const char* begin = reinterpret_cast<const char*>(cls->bytes.data());
  const char* end = begin + cls->bytes.size();
  while (end > begin && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ')) --end;
  std::int64_t label = -1;
  const auto [ptr, ec] = std::from_chars(begin, end, label);
  DTRAIN_CHECK(ec == std::errc() && ptr == end && label >= 0 && label < static_cast<std::int64_t>(classes),
               "{}.cls: '{}' is not a class index in [0, {})", name, std::string(begin, end), classes);
  return label;
}

}  // namespace

std::vector<std::int64_t> sharded_epoch_order(const std::vector<std::int64_t>& counts, int rank, int world_size,
                                              std::uint64_t seed, std::int64_t epoch, std::int64_t shuffle_buffer) {
  DTRAIN_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "sharded order: rank {} outside [0, {})", rank,
               world_size);
  check_shard_count(counts, world_size);
  DTRAIN_CHECK(shuffle_buffer >= 1, "sharded order: shuffle buffer must be >= 1, got {}", shuffle_buffer);
  std::int64_t total = 0;
  for (auto c : counts) total += c;
  const std::int64_t per_rank = (total + world_size - 1) / world_size;
  const auto order = random_permutation(static_cast<std::int64_t>(counts.size()), seed, epoch);
  std::vector<std::int64_t> stream = dealt_samples(counts, order, rank, world_size);
  DTRAIN_CHECK(!stream.empty() || per_rank == 0, "rank {}'s shards hold no samples in epoch {}", rank, epoch);
  // Equal lengths: cut the stream, or read its start again.
  const auto own = static_cast<std::int64_t>(stream.size());
  stream.resize(static_cast<std::size_t>(per_rank));
  for (std::int64_t i = own; i < per_rank; ++i) stream[static_cast<std::size_t>(i)] = stream[static_cast<std::size_t>(i % own)];

  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(epoch), static_cast<std::uint32_t>(epoch >> 32),
                    static_cast<std::uint32_t>(rank), 0x5b0ffe5u};
  std::mt19937_64 rng(seq);
  std::vector<std::int64_t> out, buffer;
  out.reserve(stream.size());
  buffer.reserve(static_cast<std::size_t>(std::min<std::int64_t>(shuffle_buffer, per_rank)));
  for (auto id : stream) {
    if (static_cast<std::int64_t>(buffer.size()) < shuffle_buffer) {
      buffer.push_back(id);
      continue;
    }
    auto& slot = buffer[bounded(rng, buffer.size())];
    out.push_back(slot);
    slot = id;
  }
  // The end of the stream: what is left, in random order.
  for (std::size_t i = buffer.size(); i > 1; --i) std::swap(buffer[i - 1], buffer[bounded(rng, i)]);
  out.insert(out.end(), buffer.begin(), buffer.end());
  return out;
}

std::shared_ptr<ShardedImages> ShardedImages::open(const std::filesystem::path& dir, ShardedImagesOptions options,
                                                   const std::vector<std::string>& classes) {
  DTRAIN_CHECK(options.shuffle_buffer >= 1, "sharded images '{}': shuffle buffer must be >= 1, got {}", dir.string(),
               options.shuffle_buffer);
  DTRAIN_CHECK(options.max_samples >= 0, "sharded images '{}': max_samples must be >= 0, got {}", dir.string(),
               options.max_samples);
  const std::vector<ShardInfo> infos = list_shards(dir);
  std::vector<std::string> listed = read_class_list(dir / "classes.txt");
  DTRAIN_CHECK(classes.empty() || classes == listed,
               "sharded images '{}': classes.txt lists {} classes that differ from the training split's {}",
               dir.string(), listed.size(), classes.size());
  std::vector<std::filesystem::path> paths;
  std::vector<std::int64_t> counts;
  std::int64_t total = 0;
  for (const ShardInfo& info : infos) {
    std::int64_t n = info.samples;
    if (options.max_samples > 0) n = std::min(n, options.max_samples - total);
    if (n <= 0) break;
    paths.push_back(info.path);
    counts.push_back(n);
    total += n;
  }
  DTRAIN_CHECK(total > 0, "sharded images '{}': the shards hold no samples", dir.string());
  return std::shared_ptr<ShardedImages>(
      new ShardedImages(dir, std::move(paths), std::move(counts), std::move(listed), std::move(options)));
}

ShardedImages::ShardedImages(std::filesystem::path dir, std::vector<std::filesystem::path> shards,
                             std::vector<std::int64_t> counts, std::vector<std::string> classes,
                             ShardedImagesOptions options)
    : dir_(std::move(dir)),
      shard_paths_(std::move(shards)),
      first_(prefix_sums(counts)),
      total_(first_.back()),
      classes_(std::move(classes)),
      options_(std::move(options)),
      // Kept samples: a shuffle buffer's worth, plus slack for loader threads working ahead.
      stream_(std::make_unique<ShardStream>(shard_paths_, first_, 2 * options_.shuffle_buffer + 4096)) {}

ShardedImages::~ShardedImages() = default;

Example ShardedImages::get(std::int64_t index) const {
  Batch b = get_epoch_batch({index}, 0);
  return {b.inputs.select(0, 0), b.targets.select(0, 0)};
}

Batch ShardedImages::get_epoch_batch(const std::vector<std::int64_t>& indices, std::int64_t epoch) const {
  return decode_image_batch(
      indices, epoch, options_.images,
      [&](std::size_t position) {
        const std::int64_t index = indices[position];
        ShardSample sample = stream_->take(index);
        const std::string name = fmt::format("{}:{}", stream_->shard_of(index).string(), sample.key);
        const std::int64_t label = parse_label(sample, name, classes_.size());
        ShardMember* image = nullptr;
        for (auto& m : sample.members) {
          if (m.extension == "jpg" || m.extension == "jpeg") image = &m;
        }
        DTRAIN_CHECK(image != nullptr, "{}: no .jpg member", name);
        return EncodedImage{std::move(image->bytes), name, label};
      },
      skipped_);
}

std::shared_ptr<const Sampler> ShardedImages::rank_sampler(int rank, int world_size, std::uint64_t seed,
                                                           bool training) const {
  std::vector<std::int64_t> counts;
  for (std::size_t s = 0; s + 1 < first_.size(); ++s) counts.push_back(first_[s + 1] - first_[s]);
  return std::make_shared<ShardSampler>(std::move(counts), rank, world_size, seed, training, options_.shuffle_buffer);
}

}  // namespace dtrain::data
