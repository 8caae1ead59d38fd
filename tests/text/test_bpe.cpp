// dtrain's byte-level BPE: training on hand-checked text, the merges file and its errors,
// and byte-exact round trips (on every fortune file when the fortunes package is there).
#include "dtrain/text/bpe.h"
#include "dtrain/text/corpus.h"

#include "support/test_support.h"
#include "text/text_test_util.h"

#include <chrono>
#include <string>
#include <vector>

using dtrain::text::BpeTokenizer;
using dtrain::text::train_bpe;
using Ids = std::vector<std::int32_t>;
using Merges = std::vector<BpeTokenizer::Merge>;

TEST_CASE("train_bpe: the most frequent pair first, ties to the smallest ids", "[cpu]") {
  // "aaabdaaabac": aa (4) -> 256; then ab and (256, a) both 2: ab (97, 98) is smaller -> 257;
  // (256, 257) (2) -> 258; then four pairs of 1: (97, 99) is the smallest -> 259.
  const BpeTokenizer bpe = train_bpe({"aaabdaaabac"}, 260);
  CHECK(bpe.merges() == Merges{{97, 97}, {97, 98}, {256, 257}, {97, 99}});
  CHECK(bpe.vocab_size() == 260);
  CHECK(bpe.token_bytes(258) == "aaab");
  // Encoding merges by rank: aa, aa, ab, ab, (aa)(ab) twice, ac.
  CHECK(bpe.encode("aaabdaaabac") == Ids{258, 100, 258, 259});
  CHECK(bpe.decode(Ids{258, 100, 258, 259}) == "aaabdaaabac");
  // Merges never cross pre-token pieces: " a" and "a" are separate pieces.
  CHECK(train_bpe({"a a a a"}, 300).merges() == Merges{{32, 97}});
  // Stops early when no pair is left.
  CHECK(train_bpe({"ab"}, 1000).vocab_size() == 257);
  CHECK_THAT(dtrain::test::error_of([] { train_bpe({"x"}, 255); }),
             Catch::Contains("train_bpe: vocab size 255 is not in [256, 2^31)"));
}

TEST_CASE("BpeTokenizer: round trip of any bytes, and its merges file", "[cpu]") {
  const std::string text =
      "The quick brown fox jumps over the lazy dog. The dog didn't care; 1234 foxes   jumped!\n\n"
      "Caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e and a cut \xe6\x97 and \xff\xfe raw bytes.\t\n";
  const BpeTokenizer bpe = train_bpe({text, text + text}, 400);
  CHECK(bpe.vocab_size() > 300);
  const Ids ids = bpe.encode(text);
  CHECK(ids.size() < text.size() / 2);
  CHECK(bpe.decode(ids) == text);
  for (std::size_t cut = 0; cut <= text.size(); cut += 7) {
    const std::string part = text.substr(0, cut);
    REQUIRE(bpe.decode(bpe.encode(part)) == part);
  }
  dtrain::test::TempDir dir;
  bpe.save(dir / "merges.bpe");
  const BpeTokenizer loaded = BpeTokenizer::load(dir / "merges.bpe");
  CHECK(loaded.merges() == bpe.merges());
  CHECK(loaded.encode(text) == ids);
  CHECK(loaded.describe() == "bpe:" + (dir / "merges.bpe").string() + " (" + std::to_string(bpe.vocab_size()) + ")");
  CHECK(bpe.describe() == "bpe:trained (" + std::to_string(bpe.vocab_size()) + ")");
  CHECK_THAT(dtrain::test::error_of([&] { bpe.decode(Ids{static_cast<std::int32_t>(bpe.vocab_size())}); }),
             Catch::Contains("is outside the vocabulary"));
}

TEST_CASE("BpeTokenizer::load: bad files are errors naming the file and line", "[cpu]") {
  dtrain::test::TempDir dir;
  auto error_for = [&](const std::string& content) {
    const auto file = dir / "bad.bpe";
    dtrain::test::write_file(file, content);
    return dtrain::test::error_of([&] { BpeTokenizer::load(file); });
  };
  const std::string name = (dir / "bad.bpe").string();
  CHECK_THAT(error_for(""), Catch::Contains("'" + name + "': empty file"));
  CHECK_THAT(
      error_for("gpt-bpe/1 300\n"),
      Catch::Contains("'" + name + "' line 1: expected the header 'dtrain-bpe/1 <vocab_size>', got 'gpt-bpe/1 300'"));
  CHECK_THAT(error_for("dtrain-bpe/1 many\n"), Catch::Contains("line 1: expected the header"));
  CHECK_THAT(error_for("dtrain-bpe/1 100\n"), Catch::Contains("line 1: vocab size 100 is not in [256, 2^31)"));
  CHECK_THAT(error_for("dtrain-bpe/1 260\n97 97\n"),
             Catch::Contains("'" + name + "': truncated: the header's vocab size 260 needs 4 merges, the file has 1"));
  CHECK_THAT(
      error_for("dtrain-bpe/1 258\n97 97\n256 257\n"),
      Catch::Contains("'" + name + "' line 3: merge '256 257' has an id beyond the vocabulary so far (ids below 257"));
  CHECK_THAT(error_for("dtrain-bpe/1 257\n97 -1\n"), Catch::Contains("line 2: merge '97 -1' has an id beyond"));
  CHECK_THAT(error_for("dtrain-bpe/1 257\n97\n"), Catch::Contains("line 2: expected a merge 'left right'"));
  CHECK_THAT(error_for("dtrain-bpe/1 257\n97 97 97\n"), Catch::Contains("line 2: expected a merge 'left right'"));
  CHECK_THAT(error_for("dtrain-bpe/1 257\n97 97\n97 98\n"),
             Catch::Contains("line 3: more merges than the header's vocab size 257 allows"));
  CHECK_THAT(error_for("dtrain-bpe/1 258\n97 97\n97 97\n"), Catch::Contains("repeats an earlier merge"));
  CHECK_THAT(dtrain::test::error_of([&] { BpeTokenizer::load(dir / "missing.bpe"); }),
             Catch::Contains("cannot open '" + (dir / "missing.bpe").string() + "'"));
}

TEST_CASE("BpeTokenizer: trained on the fortunes, every fortune file round-trips byte for byte", "[cpu]") {
  if (!std::filesystem::is_directory(dtrain::test::kFortunes)) {
    dtrain::test::skip_test_case(dtrain::test::kFortunes.string() + " is absent (Debian package fortunes)");
    return;
  }
  std::vector<std::string> texts;
  std::size_t bytes = 0;
  for (const auto& file : dtrain::text::corpus_files(dtrain::test::kFortunes)) {
    texts.push_back(dtrain::text::read_corpus_file(file));
    bytes += texts.back().size();
  }
  REQUIRE(texts.size() > 10);
  const auto start = std::chrono::steady_clock::now();
  const BpeTokenizer bpe = train_bpe(texts, 2048);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("trained vocab 2048 on " << bytes << " bytes in " << seconds << " s");
  CHECK(bpe.vocab_size() == 2048);
  std::size_t tokens = 0;
  for (const std::string& text : texts) {
    const Ids ids = bpe.encode(text);
    tokens += ids.size();
    REQUIRE(bpe.decode(ids) == text);
  }
  // English at vocab 2048 compresses to about 3 bytes a token.
  CHECK(static_cast<double>(bytes) / static_cast<double>(tokens) > 2.5);
}
