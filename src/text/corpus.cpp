#include "dtrain/text/corpus.h"

#include "dtrain/core/error.h"
#include "text/text_file.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

namespace dtrain::text {
namespace {

namespace fs = std::filesystem;

bool compressed(const fs::path& file) { return file.extension() == ".gz" || file.extension() == ".dz"; }

bool ends_with(const std::string& name, std::string_view suffix) {
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// git's and grep's test for binary data: a NUL byte near the start.
bool looks_like_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  char head[8192];
  in.read(head, sizeof head);
  return std::find(head, head + in.gcount(), '\0') == head + in.gcount();
}

std::string zlib_error(gzFile file) {
  int code = Z_OK;
  const char* message = gzerror(file, &code);
  return code == Z_ERRNO ? std::strerror(errno) : message;
}

// Every gzip member, each checked against its CRC and length; dictzip is gzip with an index
// in the header's extra field, which zlib skips.
std::string read_gzip(const fs::path& file) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> in(gzopen(file.c_str(), "rb"), &gzclose_r);
  DTRAIN_CHECK(in, "cannot open '{}': {}", file.string(), std::strerror(errno));
  gzbuffer(in.get(), 1u << 18);
  std::string text;
  std::vector<char> chunk(std::size_t{1} << 20);
  for (;;) {
    const int got = gzread(in.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    DTRAIN_CHECK(got >= 0, "'{}': corrupt gzip data: {}", file.string(), zlib_error(in.get()));
    if (got == 0) break;
    DTRAIN_CHECK(!gzdirect(in.get()), "'{}': not gzip data (expected by its .gz/.dz name)", file.string());
    text.append(chunk.data(), static_cast<std::size_t>(got));
  }
  int code = Z_OK;
  gzerror(in.get(), &code);
  DTRAIN_CHECK(code == Z_OK, "'{}': truncated or corrupt gzip data: {}", file.string(), zlib_error(in.get()));
  return text;
}

}  // namespace

std::vector<fs::path> corpus_files(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  DTRAIN_CHECK(fs::exists(status), "corpus '{}': no such file or folder", path.string());
  if (!fs::is_directory(status)) return {path};
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".") || ends_with(name, ".dat") || ends_with(name, ".u8")) continue;
    if (!entry.is_regular_file()) continue;  // subfolders (fortunes-off's off/), sockets; links to files count
    if (!compressed(entry.path()) && !looks_like_text(entry.path())) continue;
    files.push_back(entry.path());
  }
  DTRAIN_CHECK(!files.empty(),
               "corpus folder '{}' holds no text files (read: *.gz, *.dz and files without NUL bytes; "
               "left out: hidden files, *.dat, *.u8, subfolders)",
               path.string());
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_corpus_file(const fs::path& file) { return compressed(file) ? read_gzip(file) : read_text_file(file); }

}  // namespace dtrain::text
