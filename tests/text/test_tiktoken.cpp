// The tiktoken rank-file tokenizer on a hand-made file whose encodings were worked out by hand,
// its errors, and GPT-2's own file where scripts/install-deps.sh --tests put it.
#include "dtrain/text/tiktoken.h"

#include "support/test_support.h"
#include "text/text_test_util.h"

#include <string>
#include <vector>

using dtrain::text::TiktokenTokenizer;
using Ids = std::vector<std::int32_t>;

namespace {

std::string base64(std::string_view bytes) {
  constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t group = 0;
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    for (std::size_t j = 0; j < 3; ++j) group = group << 8 | (j < n ? static_cast<unsigned char>(bytes[i + j]) : 0u);
    for (std::size_t j = 0; j < 4; ++j) out += j <= n ? alphabet[(group >> (18 - 6 * j)) & 63] : '=';
  }
  return out;
}

// Every single byte at its own value, except 'a' and 'b', swapped (98 and 97); then
// 256 "bc", 257 "ab", 258 "cd", 259 "abcd".
std::string small_rank_file() {
  std::string text;
  for (int b = 0; b < 256; ++b) {
    const int rank = b == 'a' ? 'b' : b == 'b' ? 'a' : b;
    text += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(rank) + "\n";
  }
  const char* merged[] = {"bc", "ab", "cd", "abcd"};
  for (int i = 0; i < 4; ++i) text += base64(merged[i]) + " " + std::to_string(256 + i) + "\n";
  return text;
}

}  // namespace

TEST_CASE("decode_base64: RFC 4648 with padding, nothing else", "[cpu]") {
  std::string out;
  CHECK((dtrain::text::decode_base64("IQ==", out) && out == "!"));
  CHECK((dtrain::text::decode_base64("YWJj", out) && out == "abc"));
  CHECK((dtrain::text::decode_base64("YWI=", out) && out == "ab"));
  CHECK((dtrain::text::decode_base64("/w==", out) && out == "\xff"));
  CHECK_FALSE(dtrain::text::decode_base64("", out));
  CHECK_FALSE(dtrain::text::decode_base64("YWJ", out));   // not a multiple of 4
  CHECK_FALSE(dtrain::text::decode_base64("YW=j", out));  // padding inside
  CHECK_FALSE(dtrain::text::decode_base64("YW*j", out));  // not in the alphabet
  CHECK_FALSE(dtrain::text::decode_base64("IR==", out));  // bits after the last byte
  CHECK(base64("\xff\x01") == "/wE=");
}

TEST_CASE("TiktokenTokenizer: lowest-rank byte-pair merges on a hand-made rank file", "[cpu]") {
  dtrain::test::TempDir dir;
  dtrain::test::write_file(dir / "small.tiktoken", small_rank_file());
  const TiktokenTokenizer tok = TiktokenTokenizer::load(dir / "small.tiktoken");
  CHECK(tok.vocab_size() == 261);
  CHECK(tok.end_of_text() == 260);
  CHECK(tok.describe() == "gpt2:" + (dir / "small.tiktoken").string() + " (261)");
  // Single bytes are their ranks: 'b' is 97, 'a' is 98.
  CHECK(tok.encode("ba") == Ids{97, 98});
  // "abcd" is a token as a whole piece; " abcdx" merges bc (256) first, after which neither
  // "abc" nor "bcd" is a token: ' ', a, bc, d, x.
  CHECK(tok.encode("abcd abcdx") == Ids{259, 32, 98, 256, 100, 120});
  // ab (257) before cd (258), then cd; "cdab" is not a token.
  CHECK(tok.encode("cdab") == Ids{258, 257});
  CHECK(tok.decode(Ids{259, 32, 98, 256, 100, 120}) == "abcd abcdx");
  // <|endoftext|> decodes, and ordinary text that spells it never encodes to it.
  CHECK(tok.decode(Ids{260}) == "<|endoftext|>");
  const Ids spelled = tok.encode("<|endoftext|>");
  CHECK(std::find(spelled.begin(), spelled.end(), 260) == spelled.end());
  CHECK(tok.decode(spelled) == "<|endoftext|>");
  CHECK_THAT(dtrain::test::error_of([&] { tok.decode(Ids{261}); }),
             Catch::Contains("GPT-2 token id 261 is outside the vocabulary [0, 261)"));
}

TEST_CASE("TiktokenTokenizer::load: bad files are errors naming the file and line", "[cpu]") {
  dtrain::test::TempDir dir;
  const std::string name = (dir / "bad.tiktoken").string();
  auto error_for = [&](const std::string& content) {
    dtrain::test::write_file(dir / "bad.tiktoken", content);
    return dtrain::test::error_of([&] { TiktokenTokenizer::load(dir / "bad.tiktoken"); });
  };
  const std::string good = small_rank_file();
  CHECK(error_for(good).empty());
  CHECK_THAT(error_for(""), Catch::Contains("'" + name + "': no tokens"));
  CHECK_THAT(error_for(good + "YW=j 260\n"), Catch::Contains("'" + name + "' line 261: bad base64 'YW=j'"));
  CHECK_THAT(error_for(good + "YWJjZA==\n"),
             Catch::Contains("'" + name + "' line 261: expected '<base64 token bytes> <rank>', got 'YWJjZA=='"));
  CHECK_THAT(error_for(good + "eHk= 7x\n"), Catch::Contains("line 261: expected '<base64 token bytes> <rank>'"));
  CHECK_THAT(error_for(good + "eHk= 999\n"),
             Catch::Contains("line 261: rank 999 is beyond the file's 261 tokens (ranks must be 0..260)"));
  CHECK_THAT(error_for(good + "eHk= 259\n"), Catch::Contains("line 261: rank 259 repeats line 260"));
  CHECK_THAT(error_for(good + "YWJjZA== 260\n"), Catch::Contains("line 261: token 'abcd' repeats line 260"));
  // A file cut short before its last single bytes.
  const std::string first_255 = good.substr(0, good.find(base64("\xff")));
  CHECK_THAT(error_for(first_255), Catch::Contains("'" + name + "': byte 0xff is not a token"));
}

TEST_CASE("TiktokenTokenizer: GPT-2's rank file", "[cpu]") {
  const auto file = dtrain::test::gpt2_rank_file();
  if (!std::filesystem::exists(file)) {
    dtrain::test::skip_test_case(file.string() + " is absent (scripts/install-deps.sh --tests fetches it)");
    return;
  }
  const TiktokenTokenizer tok = TiktokenTokenizer::load(file);
  CHECK(tok.vocab_size() == 50257);
  CHECK(tok.end_of_text() == 50256);
  CHECK(tok.encode("Hello world") == Ids{15496, 995});
  const std::string text = "GPT-2's tokenizer: 12345 tokens,  spaces\n\nand Unicode (caf\xc3\xa9).\n";
  CHECK(tok.decode(tok.encode(text)) == text);
}
