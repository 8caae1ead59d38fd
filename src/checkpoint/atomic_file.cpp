#include "dtrain/checkpoint/atomic_file.h"

#include "dtrain/core/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>

// Header-only use of libxxhash: nothing to link, and the installed package adds no dependency.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace dtrain::checkpoint {

struct Checksum::State {
  XXH3_state_t xxh;
};

Checksum::Checksum() : state_(std::make_unique<State>()) { XXH3_64bits_reset(&state_->xxh); }
Checksum::~Checksum() = default;

void Checksum::update(const void* data, std::size_t size) { XXH3_64bits_update(&state_->xxh, data, size); }

std::string Checksum::hex() const { return fmt::format("{:016x}", XXH3_64bits_digest(&state_->xxh)); }

std::string describe_io_error(int code) {
  std::string text = std::strerror(code);
  if (code == ENOSPC || code == EDQUOT) text += " (the disk is full)";
  if (code == EFBIG) text += " (over the file-size limit)";
  return text;
}

AtomicFile::AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
  temporary_ = target_;
  temporary_ += fmt::format(".tmp-{}", ::getpid());
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DTRAIN_CHECK(fd_ >= 0, "checkpoint: cannot create {}: {}", temporary_.string(), describe_io_error(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temporary_.c_str());
  }
}

void AtomicFile::write(const void* data, std::size_t size) {
  DTRAIN_CHECK(fd_ >= 0, "checkpoint: {} was already committed", target_.string());
  checksum_.update(data, size);
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    DTRAIN_CHECK(n > 0, "checkpoint: writing {}: {}", target_.string(), describe_io_error(n < 0 ? errno : ENOSPC));
    p += n;
    size -= static_cast<std::size_t>(n);
    bytes_ += static_cast<std::uint64_t>(n);
  }
}

void AtomicFile::commit() {
  DTRAIN_CHECK(fd_ >= 0, "checkpoint: {} was already committed", target_.string());
  // Data and size on disk before the name points at them: a crash after the rename must
  // not find a file of the right name with missing contents.
  DTRAIN_CHECK(::fsync(fd_) == 0, "checkpoint: fsync of {}: {}", target_.string(), describe_io_error(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int code = errno;
    ::unlink(temporary_.c_str());
    DTRAIN_FAIL("checkpoint: closing {}: {}", target_.string(), describe_io_error(code));
  }
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) {
    const int code = errno;
    ::unlink(temporary_.c_str());
    DTRAIN_FAIL("checkpoint: renaming {} to {}: {}", temporary_.string(), target_.string(), describe_io_error(code));
  }
  fsync_directory(target_.parent_path().empty() ? std::filesystem::path(".") : target_.parent_path());
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  AtomicFile f(path);
  f.write(text);
  f.commit();
}

std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path) {
  // read(2) in large chunks: a checkpoint's files are hundreds of MB, where iostreams cost
  // several times the disk's own time.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DTRAIN_CHECK(fd >= 0, "checkpoint: cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const int code = errno;
    ::close(fd);
    DTRAIN_FAIL("checkpoint: cannot read the size of {}: {}", path.string(), std::strerror(code));
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, std::min<std::size_t>(bytes.size() - done, 8u << 20));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int code = n < 0 ? errno : 0;
      ::close(fd);
      DTRAIN_FAIL("checkpoint: reading {}: {}", path.string(),
                  code ? std::strerror(code) : fmt::format("it ended after {} of {} bytes", done, bytes.size()));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return bytes;
}

void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DTRAIN_CHECK(fd >= 0, "checkpoint: cannot open directory {}: {}", dir.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int code = errno;
  ::close(fd);
  DTRAIN_CHECK(rc == 0, "checkpoint: fsync of directory {}: {}", dir.string(), describe_io_error(code));
}

}  // namespace dtrain::checkpoint
