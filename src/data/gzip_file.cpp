#include "data/gzip_file.h"

#include "dtrain/core/error.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

namespace dtrain::data {
namespace {

std::vector<std::uint8_t> read_plain(const std::filesystem::path& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  DTRAIN_CHECK(file, "cannot open '{}': {}", path.string(), std::strerror(errno));
  std::vector<std::uint8_t> bytes;
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (!ec) bytes.reserve(size);
  // Read to the end rather than trusting file_size (the file may change under us).
  std::uint8_t chunk[1 << 16];
  std::size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, file.get())) > 0) bytes.insert(bytes.end(), chunk, chunk + n);
  DTRAIN_CHECK(!std::ferror(file.get()), "error reading '{}': {}", path.string(), std::strerror(errno));
  return bytes;
}

std::string gz_error_text(gzFile file) {
  int code = Z_OK;
  const char* text = gzerror(file, &code);
  return code == Z_ERRNO ? std::strerror(errno) : std::string(text);
}

// gzread inflates every concatenated member and checks each member's CRC and length. A
// stream that ends early is not a read error: gzread returns what it has and reports
// Z_BUF_ERROR ("unexpected end of file") through gzerror, so that is checked at the end.
std::vector<std::uint8_t> read_gzip(const std::filesystem::path& path) {
  errno = 0;
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), &gzclose_r);
  DTRAIN_CHECK(file, "cannot open '{}': {}", path.string(), errno ? std::strerror(errno) : "out of memory");
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  gzbuffer(file.get(), static_cast<unsigned>(kChunk));  // fewer, larger reads of the compressed file
  std::vector<std::uint8_t> bytes;
  std::size_t have = 0;
  for (;;) {
    // Read into all the spare capacity; the vector grows geometrically.
    bytes.resize(std::max(bytes.capacity(), have + kChunk));
    auto want = static_cast<unsigned>(std::min<std::size_t>(bytes.size() - have, 1u << 30));
    int n = gzread(file.get(), bytes.data() + have, want);
    DTRAIN_CHECK(n >= 0, "'{}': corrupt gzip data: {}", path.string(), gz_error_text(file.get()));
    if (n == 0) break;
    have += static_cast<std::size_t>(n);
    // Without a gzip header zlib copies the file through unchanged; a .gz name promised one.
    DTRAIN_CHECK(!gzdirect(file.get()), "'{}': expected gzip data (a .gz name) but the file has no gzip header",
                 path.string());
  }
  int code = Z_OK;
  gzerror(file.get(), &code);
  DTRAIN_CHECK(code == Z_OK, "'{}': truncated or corrupt gzip data: {}", path.string(), gz_error_text(file.get()));
  bytes.resize(have);
  bytes.shrink_to_fit();  // the dataset keeps these bytes: drop up to 2x growth slack
  return bytes;
}

}  // namespace

std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path) {
  return path.extension() == ".gz" ? read_gzip(path) : read_plain(path);
}

}  // namespace dtrain::data
