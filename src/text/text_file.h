// Whole-file reads and atomic writes of the tokenizers' text files, and their lines.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace dtrain::text {

// The bytes of `file`; an error naming it when it cannot be read.
std::string read_text_file(const std::filesystem::path& file);
// Writes `bytes` to a temporary name beside `file`, then renames it over `file`.
void write_text_file(const std::filesystem::path& file, std::string_view bytes);
// At most 40 bytes of a line for an error message, non-printable bytes as \xNN.
std::string excerpt(std::string_view line);

// The lines of a text, without their '\n' (or "\r\n"); a last '\n' ends the last line.
class LineReader {
 public:
  explicit LineReader(std::string_view text) : text_(text) {}
  bool next(std::string_view& line);
  // The 1-based number of the line next() returned last.
  std::size_t number() const { return number_; }

 private:
  std::string_view text_;
  std::size_t at_ = 0;
  std::size_t number_ = 0;
};

}  // namespace dtrain::text
