// Files that are whole or absent: AtomicFile writes to a temporary name beside the target,
// and commit() fsyncs it, renames it over the target and fsyncs the directory, so a crash
// at any moment leaves either the old file or the new one, never a torn one. The bytes are
// hashed (XXH3-64) as they are written, for the checkpoint manifest's checksums.
//
//   checkpoint::AtomicFile f(dir / "latest");
//   f.write(text.data(), text.size());
//   f.commit();
//
// A failed write (a full disk, a file-size limit) is an Error naming the file and the
// system's reason; the temporary file is removed and the target is left as it was.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::checkpoint {

// A file's checksum as the manifest records it: XXH3-64 as 16 lowercase hex digits.
class Checksum {
 public:
  Checksum();
  ~Checksum();
  Checksum(const Checksum&) = delete;
  Checksum& operator=(const Checksum&) = delete;
  void update(const void* data, std::size_t size);
  std::string hex() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();  // without commit(): the temporary file is removed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsync, rename over the target, fsync the directory.
  void commit();

  const std::filesystem::path& target() const { return target_; }
  std::uint64_t bytes() const { return bytes_; }
  std::string checksum() const { return checksum_.hex(); }

 private:
  std::filesystem::path target_, temporary_;
  int fd_ = -1;
  std::uint64_t bytes_ = 0;
  Checksum checksum_;
};

// Writes `text` to `path` atomically (AtomicFile).
void write_file_atomically(const std::filesystem::path& path, std::string_view text);
// The whole file; an Error naming it when it cannot be read.
std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path);
// fsyncs a directory, so that the names created or renamed in it survive a crash.
void fsync_directory(const std::filesystem::path& dir);
// The system's words for errno `code`, with a hint for a full disk.
std::string describe_io_error(int code);

}  // namespace dtrain::checkpoint
