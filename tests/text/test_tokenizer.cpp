// The byte tokenizer, make_tokenizer's specs, and corpora (folders, gzip and dictzip files).
#include "dtrain/text/corpus.h"
#include "dtrain/text/tokenizer.h"

#include "support/test_support.h"
#include "text/text_test_util.h"

#include <string>
#include <vector>

using dtrain::text::make_tokenizer;
using Ids = std::vector<std::int32_t>;

namespace {

// gzip.compress(b"hello, ", mtime=0) + gzip.compress(b"gzip\n", mtime=0): two members.
const unsigned char kTwoMembers[] = {0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0xcb, 0x48, 0xcd,
                                     0xc9, 0xc9, 0xd7, 0x51, 0x00, 0x00, 0x99, 0x56, 0xea, 0x11, 0x07, 0x00, 0x00,
                                     0x00, 0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x4b, 0xaf,
                                     0xca, 0x2c, 0xe0, 0x02, 0x00, 0xff, 0x7c, 0x5e, 0x61, 0x05, 0x00, 0x00, 0x00};

std::string two_members(std::size_t size = sizeof kTwoMembers) {
  return std::string(reinterpret_cast<const char*>(kTwoMembers), size);
}

}  // namespace

TEST_CASE("bytes: one id per byte, every byte round-trips", "[cpu]") {
  const auto tok = make_tokenizer("bytes");
  CHECK(tok->vocab_size() == 256);
  CHECK(tok->describe() == "bytes (256)");
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const Ids ids = tok->encode(all);
  REQUIRE(ids.size() == 256);
  for (int b = 0; b < 256; ++b) CHECK(ids[static_cast<std::size_t>(b)] == b);
  CHECK(tok->decode(ids) == all);
  CHECK(tok->encode("").empty());
  CHECK_THAT(dtrain::test::error_of([&] {
               tok->decode(Ids{65, 256});
             }),
             Catch::Contains("byte token id 256 (at 1) is outside the vocabulary [0, 256)"));
}

TEST_CASE("make_tokenizer: specs", "[cpu]") {
  dtrain::test::TempDir dir;
  dtrain::test::write_file(dir / "m.bpe", "dtrain-bpe/1 257\n104 105\n");
  const auto bpe = make_tokenizer("bpe:" + (dir / "m.bpe").string());
  CHECK(bpe->vocab_size() == 257);
  CHECK(bpe->encode("hi hi") == Ids{256, 32, 256});
  CHECK(bpe->describe() == "bpe:" + (dir / "m.bpe").string() + " (257)");
  for (const char* bad : {"", "byte", "bpe", "bpe:", "gpt2:", "wordpiece:x.txt"}) {
    CHECK_THAT(dtrain::test::error_of([&] { make_tokenizer(bad); }),
               Catch::Contains(std::string("tokenizer '") + bad + "': expected bytes, bpe:FILE"));
  }
  CHECK_THAT(dtrain::test::error_of([&] { make_tokenizer("gpt2:" + (dir / "none").string()); }),
             Catch::Contains("cannot open '" + (dir / "none").string() + "'"));
}

TEST_CASE("corpus_files: a folder's text files in sorted order", "[cpu]") {
  dtrain::test::TempDir dir;
  dtrain::test::write_file(dir / "b", "second\n");
  dtrain::test::write_file(dir / "a", "first\n");
  dtrain::test::write_file(dir / "a.dat", "index");    // fortune's strfile index
  dtrain::test::write_file(dir / "b.u8", "second\n");  // fortune's UTF-8 copy
  dtrain::test::write_file(dir / ".hidden", "no\n");
  dtrain::test::write_file(dir / "binary", std::string("\x7f"
                                                       "ELF\0\0",
                                                       6));
  dtrain::test::write_file(dir / "c.gz", two_members());
  dtrain::test::write_file(dir / "sub" / "d", "in a subfolder\n");
  using Paths = std::vector<std::filesystem::path>;
  CHECK(dtrain::text::corpus_files(dir.path()) == Paths{dir / "a", dir / "b", dir / "c.gz"});
  CHECK(dtrain::text::corpus_files(dir / "binary") == Paths{dir / "binary"});  // named: read as it is
  CHECK(dtrain::text::read_corpus_file(dir / "c.gz") == "hello, gzip\n");
  CHECK(dtrain::text::read_corpus_file(dir / "a") == "first\n");
  CHECK_THAT(dtrain::test::error_of([&] { dtrain::text::corpus_files(dir / "missing"); }),
             Catch::Contains("corpus '" + (dir / "missing").string() + "': no such file or folder"));
  CHECK_THAT(dtrain::test::error_of([&] { dtrain::text::corpus_files(dir / "sub" / "empty"); }),
             Catch::Contains("no such file or folder"));
  std::filesystem::create_directory(dir / "empty");
  CHECK_THAT(dtrain::test::error_of([&] { dtrain::text::corpus_files(dir / "empty"); }),
             Catch::Contains("corpus folder '" + (dir / "empty").string() + "' holds no text files"));
}

TEST_CASE("read_corpus_file: truncated or false gzip data is an error naming the file", "[cpu]") {
  dtrain::test::TempDir dir;
  dtrain::test::write_file(dir / "cut.gz", two_members(sizeof kTwoMembers - 6));
  CHECK_THAT(dtrain::test::error_of([&] { dtrain::text::read_corpus_file(dir / "cut.gz"); }),
             Catch::Contains(fmt::format("'{}': truncated or corrupt gzip data", (dir / "cut.gz").string())));
  dtrain::test::write_file(dir / "plain.dz", "not compressed\n");
  CHECK_THAT(dtrain::test::error_of([&] { dtrain::text::read_corpus_file(dir / "plain.dz"); }),
             Catch::Contains(fmt::format("'{}': not gzip data", (dir / "plain.dz").string())));
}

TEST_CASE("corpora: the fortunes folder and the GCIDE dictzip file", "[cpu]") {
  if (!std::filesystem::is_directory(dtrain::test::kFortunes) || !std::filesystem::exists(dtrain::test::kGcide)) {
    dtrain::test::skip_test_case("the fortunes or dict-gcide Debian package is absent");
    return;
  }
  const auto files = dtrain::text::corpus_files(dtrain::test::kFortunes);
  REQUIRE(files.size() > 10);
  for (const auto& file : files) {
    CHECK(file.extension() != ".dat");
    CHECK(file.extension() != ".u8");
  }
  CHECK(std::is_sorted(files.begin(), files.end()));
  const std::string gcide = dtrain::text::read_corpus_file(dtrain::test::kGcide);
  CHECK(gcide.size() > 30'000'000);
  CHECK(gcide.find("Collaborative International Dictionary of English") != std::string::npos);
}
