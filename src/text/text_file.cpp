#include "text/text_file.h"

#include "dtrain/core/error.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace dtrain::text {

std::string read_text_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  DTRAIN_CHECK(in.is_open(), "cannot open '{}': {}", file.string(), std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DTRAIN_CHECK(!in.bad(), "cannot read '{}'", file.string());
  return bytes;
}

void write_text_file(const std::filesystem::path& file, std::string_view bytes) {
  std::filesystem::path temp = file;
  temp += fmt::format(".tmp.{}", ::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    DTRAIN_CHECK(out.is_open(), "cannot write '{}': {}", temp.string(), std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    DTRAIN_CHECK(out.good(), "error writing '{}'", temp.string());
  }
  std::error_code ec;
  std::filesystem::rename(temp, file, ec);
  if (ec) {
    std::filesystem::remove(temp);
    DTRAIN_FAIL("cannot rename '{}' to '{}': {}", temp.string(), file.string(), ec.message());
  }
}

std::string excerpt(std::string_view line) {
  std::string out;
  for (std::size_t i = 0; i < line.size() && i < 40; ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (line.size() > 40) out += "...";
  return out;
}

bool LineReader::next(std::string_view& line) {
  if (at_ >= text_.size()) return false;
  std::size_t end = text_.find('\n', at_);
  if (end == std::string_view::npos) end = text_.size();
  line = text_.substr(at_, end - at_);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  at_ = end + 1;
  ++number_;
  return true;
}

}  // namespace dtrain::text
