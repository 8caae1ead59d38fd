// The tar-shard reader as a data loader meets a shard: the input is the .tar file, read
// front to back sample by sample, and again skipping every sample (how list_shards counts
// a shard without a shards.txt).
#include "fuzz_support.h"

#include "dtrain/core/error.h"
#include "dtrain/data/tar_shards.h"

#include <limits>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dtrain::data;
  using dtrain::fuzz::expect;
  const std::filesystem::path shard = dtrain::fuzz::scratch_dir() / "shard.tar";
  dtrain::fuzz::write_file(shard, data, size);

  std::int64_t read = -1;
  try {
    TarShardReader reader(shard);
    ShardSample sample;
    std::int64_t n = 0;
    while (reader.next(sample)) {
      expect(!sample.key.empty() && !sample.members.empty(), "a sample has a key and members");
      for (const ShardMember& m : sample.members) expect(!m.extension.empty(), "a member has an extension");
      ++n;
    }
    read = n;
    dtrain::fuzz::accepted("read " + std::to_string(n) + " samples");
  } catch (const dtrain::Error& e) {
    dtrain::fuzz::rejected(e);
  }
  try {
    TarShardReader reader(shard);
    const std::int64_t skipped = reader.skip(std::numeric_limits<std::int64_t>::max());
    expect(read < 0 || skipped == read, "skipping counts the samples that reading yields");
    dtrain::fuzz::accepted("skipped " + std::to_string(skipped) + " samples");
  } catch (const dtrain::Error& e) {
    dtrain::fuzz::rejected(e);
  }
  return 0;
}
