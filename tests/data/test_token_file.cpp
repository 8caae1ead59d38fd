// Token files: dtrain's format at both id widths, llm.c's .bin files, and the errors.
#include "dtrain/data/token_file.h"

#include "support/test_support.h"

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using dtrain::data::read_token_file;
using dtrain::data::write_token_file;
using Ids = std::vector<std::int32_t>;

namespace {

std::string le32(std::int32_t v) {
  std::string bytes(4, '\0');
  std::memcpy(bytes.data(), &v, 4);
  return bytes;
}

// llm.c's header: 256 int32, magic, version, token count, zeros.
std::string llmc_header(std::int32_t magic, std::int32_t version, std::int32_t count) {
  return le32(magic) + le32(version) + le32(count) + std::string(253 * 4, '\0');
}

}  // namespace

TEST_CASE("token files: round trip at uint16 and uint32", "[cpu]") {
  dtrain::test::TempDir dir;
  const Ids small = {0, 1, 50256, 65535, 7};
  write_token_file(dir / "gpt2.tok", small, 65536);
  CHECK(std::filesystem::file_size(dir / "gpt2.tok") == 32 + 2 * small.size());
  auto data = read_token_file(dir / "gpt2.tok");
  CHECK(data.tokens == small);
  CHECK(data.vocab_size == 65536);

  const Ids large = {0, 65536, 128255, 3};
  write_token_file(dir / "llama.tok", large, 128256);
  CHECK(std::filesystem::file_size(dir / "llama.tok") == 32 + 4 * large.size());
  data = read_token_file(dir / "llama.tok");
  CHECK(data.tokens == large);
  CHECK(data.vocab_size == 128256);

  write_token_file(dir / "empty.tok", Ids{}, 256);
  CHECK(read_token_file(dir / "empty.tok").tokens.empty());
  // Vocab size unknown (0): the width follows the largest id.
  write_token_file(dir / "unknown.tok", Ids{70000}, 0);
  CHECK(read_token_file(dir / "unknown.tok").tokens == Ids{70000});
  CHECK(std::filesystem::file_size(dir / "unknown.tok") == 36);
  // The magic, version, width, vocab and count, little-endian.
  std::string head(16, '\0');
  std::ifstream(dir / "gpt2.tok", std::ios::binary).read(head.data(), 16);
  CHECK(head == std::string("DTRAINTK") + le32(1) + le32(2));
  CHECK_THAT(dtrain::test::error_of([&] {
               write_token_file(dir / "x.tok", Ids{5, 256}, 256);
             }),
             Catch::Contains("write_token_file '" + (dir / "x.tok").string() +
                             "': token 1 is id 256, outside the vocabulary [0, 256)"));
  CHECK_FALSE(std::filesystem::exists(dir / "x.tok"));
}

TEST_CASE("token files: llm.c's .bin files", "[cpu]") {
  dtrain::test::TempDir dir;
  std::string gpt2 = llmc_header(20240520, 1, 3);
  for (std::uint16_t id : {std::uint16_t{15496}, std::uint16_t{995}, std::uint16_t{50256}}) {
    gpt2.append(reinterpret_cast<const char*>(&id), 2);
  }
  dtrain::test::write_file(dir / "train.bin", gpt2);
  auto data = read_token_file(dir / "train.bin");
  CHECK(data.tokens == Ids{15496, 995, 50256});
  CHECK(data.vocab_size == 0);
  dtrain::test::write_file(dir / "llama.bin", llmc_header(20240801, 7, 2) + le32(128000) + le32(9));
  CHECK(read_token_file(dir / "llama.bin").tokens == Ids{128000, 9});
  dtrain::test::write_file(dir / "v2.bin", llmc_header(20240520, 2, 0));
  CHECK_THAT(dtrain::test::error_of([&] { read_token_file(dir / "v2.bin"); }),
             Catch::Contains("llm.c token file '" + (dir / "v2.bin").string() +
                             "': version 2, expected 1 for magic 20240520"));
  dtrain::test::write_file(dir / "short.bin", gpt2.substr(0, gpt2.size() - 1));
  CHECK_THAT(
      dtrain::test::error_of([&] { read_token_file(dir / "short.bin"); }),
      Catch::Contains("token file '" + (dir / "short.bin").string() +
                      "': truncated: the header says 3 tokens of 2 bytes (6 bytes) after its 1024, the file has 5"));
  dtrain::test::write_file(dir / "head.bin", gpt2.substr(0, 100));
  CHECK_THAT(
      dtrain::test::error_of([&] { read_token_file(dir / "head.bin"); }),
      Catch::Contains("llm.c token file '" + (dir / "head.bin").string() + "': truncated header (100 of 1024 bytes)"));
}

TEST_CASE("token files: truncated, wrong magic, ids beyond the vocabulary", "[cpu]") {
  dtrain::test::TempDir dir;
  write_token_file(dir / "ok.tok", Ids{1, 2, 3}, 300);
  std::string bytes(38, '\0');
  std::ifstream(dir / "ok.tok", std::ios::binary).read(bytes.data(), 38);
  auto error_for = [&](const std::string& content) {
    dtrain::test::write_file(dir / "bad.tok", content);
    return dtrain::test::error_of([&] { read_token_file(dir / "bad.tok"); });
  };
  const std::string name = "token file '" + (dir / "bad.tok").string() + "'";
  CHECK(error_for(bytes).empty());
  CHECK_THAT(error_for(bytes.substr(0, 37)),
             Catch::Contains(
                 name + ": truncated: the header says 3 tokens of 2 bytes (6 bytes) after its 32, the file has 5"));
  CHECK_THAT(error_for(bytes + "xx"), Catch::Contains(name + ": wrong size: the header says 3 tokens"));
  CHECK_THAT(error_for(bytes.substr(0, 20)), Catch::Contains(name + ": truncated header (20 of 32 bytes)"));
  CHECK_THAT(error_for("DTRAIN"), Catch::Contains(name + ": truncated (6 bytes)"));
  CHECK_THAT(error_for("NOTATOKENFILE-----------------------"),
             Catch::Contains(name + ": wrong magic: expected \"DTRAINTK\" (dtrain) or an llm.c .bin header"));
  std::string beyond = bytes;
  beyond[32 + 2] = static_cast<char>(0x2c);  // 300 = 0x012c: the second id
  beyond[32 + 3] = static_cast<char>(0x01);
  CHECK_THAT(error_for(beyond), Catch::Contains(name + ": token 1 is id 300, beyond the vocabulary of 300"));
  std::string version = bytes;
  version[8] = 2;
  CHECK_THAT(error_for(version), Catch::Contains(name + ": version 2, expected 1"));
  std::string width = bytes;
  width[12] = 3;
  CHECK_THAT(error_for(width), Catch::Contains(name + ": id width 3 bytes, expected 2 or 4"));
  CHECK_THAT(dtrain::test::error_of([&] { read_token_file(dir / "missing.tok"); }),
             Catch::Contains("cannot open token file '" + (dir / "missing.tok").string() + "'"));
}
