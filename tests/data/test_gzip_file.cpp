#include "data/gzip_file.h"
#include "data/idx_files.h"

using namespace dtrain;
using dtrain::test::require_error;
using dtrain::test::TempDir;
using dtrain::test::write_file;
using dtrain::test::write_gzip;

namespace {
std::string pseudo_random_bytes(std::size_t n) {
  std::string s(n, '\0');
  std::uint64_t x = 88172645463325252ull;
  for (auto& c : s) {  // xorshift64: incompressible enough that sizes stay realistic
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  return s;
}
std::vector<std::uint8_t> as_bytes(const std::string& s) { return {s.begin(), s.end()}; }
}  // namespace

TEST_CASE("read_file_bytes reads plain files", "[cpu][data]") {
  TempDir dir;
  const std::string content = pseudo_random_bytes(200000);
  write_file(dir / "plain.bin", content);
  CHECK(data::read_file_bytes(dir / "plain.bin") == as_bytes(content));
  write_file(dir / "empty.bin", "");
  CHECK(data::read_file_bytes(dir / "empty.bin").empty());
  require_error([&] { data::read_file_bytes(dir / "missing.bin"); }, {"cannot open", "missing.bin"});
}

TEST_CASE("read_file_bytes decompresses large and multi-member gzip files", "[cpu][data]") {
  TempDir dir;
  // Larger than the 1 MiB read chunk, so the buffer has to grow.
  const std::string big = pseudo_random_bytes(3'500'001);
  write_gzip(dir / "big.gz", big);
  CHECK(data::read_file_bytes(dir / "big.gz") == as_bytes(big));
  // Concatenated members (as `cat a.gz b.gz` makes) decompress to the concatenation.
  write_gzip(dir / "a.gz", "first member,");
  write_gzip(dir / "b.gz", " second member");
  write_file(dir / "ab.gz", dtrain::test::read_file(dir / "a.gz") + dtrain::test::read_file(dir / "b.gz"));
  CHECK(data::read_file_bytes(dir / "ab.gz") == as_bytes("first member, second member"));
}

TEST_CASE("read_file_bytes reports damaged gzip files with zlib's reason", "[cpu][data]") {
  TempDir dir;
  write_gzip(dir / "good.gz", pseudo_random_bytes(100000));
  const std::string good = dtrain::test::read_file(dir / "good.gz");
  write_file(dir / "cut.gz", good.substr(0, good.size() / 3));
  require_error([&] { data::read_file_bytes(dir / "cut.gz"); }, {"cut.gz", "truncated", "unexpected end of file"});
  std::string header_only = good.substr(0, 10);
  write_file(dir / "header.gz", header_only);
  require_error([&] { data::read_file_bytes(dir / "header.gz"); }, {"header.gz", "unexpected end of file"});
  std::string bad = good;
  bad[3] = static_cast<char>(0xe0);  // reserved gzip flag bits
  write_file(dir / "flags.gz", bad);
  require_error([&] { data::read_file_bytes(dir / "flags.gz"); }, {"flags.gz", "corrupt gzip"});
  write_file(dir / "text.gz", "not compressed at all");
  require_error([&] { data::read_file_bytes(dir / "text.gz"); }, {"text.gz", "no gzip header"});
}
