#include "dtrain/data/token_file.h"

#include "dtrain/core/error.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

namespace dtrain::data {
namespace {

namespace fs = std::filesystem;

constexpr std::array<char, 8> kMagic = {'D', 'T', 'R', 'A', 'I', 'N', 'T', 'K'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 32;  // magic, version u32, width u32, vocab i64, count i64
constexpr std::size_t kLlmcHeaderBytes = 256 * 4;

static_assert(std::endian::native == std::endian::little, "token files are read and written as little-endian");

template <class T>
T load(const std::string& bytes, std::size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof value);
  return value;
}

template <class T>
void store(std::string& bytes, T value) {
  bytes.append(reinterpret_cast<const char*>(&value), sizeof value);
}

std::string read_all(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  DTRAIN_CHECK(in.is_open(), "cannot open token file '{}': {}", file.string(), std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DTRAIN_CHECK(!in.bad(), "cannot read token file '{}'", file.string());
  return bytes;
}

// Reads `count` ids of `width` bytes at `at`, which must end the file; each below `vocab` (> 0).
std::vector<std::int32_t> read_ids(const fs::path& file, const std::string& bytes, std::size_t at, std::int64_t count,
                                   std::uint32_t width, std::int64_t vocab) {
  DTRAIN_CHECK(count >= 0, "token file '{}': the header's token count {} is negative", file.string(), count);
  const std::uint64_t have = bytes.size() - at;
  const bool fits = static_cast<std::uint64_t>(count) <= have / width;
  DTRAIN_CHECK(fits && have == static_cast<std::uint64_t>(count) * width,
               "token file '{}': {}: the header says {} tokens of {} bytes ({} bytes) after its {}, the file has {}",
               file.string(), fits ? "wrong size" : "truncated", count, width,
               static_cast<std::uint64_t>(count) * width, at, have);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(count));
  const std::int64_t limit = vocab > 0 ? vocab : std::int64_t{1} << 31;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t id = width == 2 ? std::int64_t{load<std::uint16_t>(bytes, at + 2 * i)}
                                       : std::int64_t{load<std::uint32_t>(bytes, at + 4 * i)};
    DTRAIN_CHECK(id<limit, "token file '{}': token {} is id {}, beyond {}", file.string(), i, id, vocab> 0
                     ? fmt::format("the vocabulary of {}", vocab)
                     : std::string("an int32 (2^31 - 1)"));
    ids[i] = static_cast<std::int32_t>(id);
  }
  return ids;
}

TokenData read_llmc(const fs::path& file, const std::string& bytes) {
  const auto magic = load<std::int32_t>(bytes, 0);
  const auto version = load<std::int32_t>(bytes, 4);
  const bool gpt2 = magic == 20240520;
  const std::int32_t expected_version = gpt2 ? 1 : 7;
  DTRAIN_CHECK(version == expected_version, "llm.c token file '{}': version {}, expected {} for magic {}",
               file.string(), version, expected_version, magic);
  DTRAIN_CHECK(bytes.size() >= kLlmcHeaderBytes, "llm.c token file '{}': truncated header ({} of {} bytes)",
               file.string(), bytes.size(), kLlmcHeaderBytes);
  TokenData data;
  data.tokens = read_ids(file, bytes, kLlmcHeaderBytes, load<std::int32_t>(bytes, 8), gpt2 ? 2 : 4, 0);
  return data;
}

}  // namespace

TokenData read_token_file(const fs::path& file) {
  const std::string bytes = read_all(file);
  DTRAIN_CHECK(bytes.size() >= 12, "token file '{}': truncated ({} bytes): too short for a header", file.string(),
               bytes.size());
  const auto llmc_magic = load<std::int32_t>(bytes, 0);
  if (llmc_magic == 20240520 || llmc_magic == 20240801) return read_llmc(file, bytes);
  DTRAIN_CHECK(std::equal(kMagic.begin(), kMagic.end(), bytes.begin()),
               "token file '{}': wrong magic: expected \"DTRAINTK\" (dtrain) or an llm.c .bin header (int32 "
               "20240520 or 20240801)",
               file.string());
  DTRAIN_CHECK(bytes.size() >= kHeaderBytes, "token file '{}': truncated header ({} of {} bytes)", file.string(),
               bytes.size(), kHeaderBytes);
  const auto version = load<std::uint32_t>(bytes, 8);
  const auto width = load<std::uint32_t>(bytes, 12);
  TokenData data;
  data.vocab_size = load<std::int64_t>(bytes, 16);
  DTRAIN_CHECK(version == kVersion, "token file '{}': version {}, expected {}", file.string(), version, kVersion);
  DTRAIN_CHECK(width == 2 || width == 4, "token file '{}': id width {} bytes, expected 2 or 4", file.string(), width);
  DTRAIN_CHECK(data.vocab_size >= 0 && data.vocab_size <= (std::int64_t{1} << 31),
               "token file '{}': vocab size {} out of range", file.string(), data.vocab_size);
  data.tokens = read_ids(file, bytes, kHeaderBytes, load<std::int64_t>(bytes, 24), width, data.vocab_size);
  return data;
}

void write_token_file(const fs::path& file, std::span<const std::int32_t> tokens, std::int64_t vocab_size) {
  DTRAIN_CHECK(vocab_size >= 0 && vocab_size <= (std::int64_t{1} << 31),
               "write_token_file '{}': vocab size {} out of range [0, 2^31]", file.string(), vocab_size);
  std::int64_t largest = -1;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    DTRAIN_CHECK(tokens[i] >= 0 && (vocab_size == 0 || tokens[i] < vocab_size),
                 "write_token_file '{}': token {} is id {}, outside the vocabulary [0, {})", file.string(), i,
                 tokens[i], vocab_size);
    largest = std::max<std::int64_t>(largest, tokens[i]);
  }
  const std::uint32_t width = (vocab_size > 0 ? vocab_size <= 65536 : largest < 65536) ? 2 : 4;
  std::string bytes(kMagic.begin(), kMagic.end());
  store(bytes, kVersion);
  store(bytes, width);
  store(bytes, vocab_size);
  store(bytes, static_cast<std::int64_t>(tokens.size()));
  bytes.reserve(kHeaderBytes + tokens.size() * width);
  for (std::int32_t id : tokens) {
    if (width == 2) {
      store(bytes, static_cast<std::uint16_t>(id));
    } else {
      store(bytes, static_cast<std::uint32_t>(id));
    }
  }
  fs::path temp = file;
  temp += fmt::format(".tmp.{}", ::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    DTRAIN_CHECK(out.is_open(), "cannot write token file '{}': {}", temp.string(), std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    DTRAIN_CHECK(out.good(), "error writing token file '{}'", temp.string());
  }
  std::error_code ec;
  fs::rename(temp, file, ec);
  if (ec) {
    fs::remove(temp, ec);
    DTRAIN_FAIL("cannot rename '{}' to '{}'", temp.string(), file.string());
  }
}

}  // namespace dtrain::data
