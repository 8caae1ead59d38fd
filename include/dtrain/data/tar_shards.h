// Sharded records in WebDataset's format: plain POSIX tar files whose members are named
// "<key>.<extension>", the members of one sample consecutive and sharing the key
// ("000000123.jpg", "000000123.cls"). Millions of small files are slow on shared file
// systems; a few hundred large tar files read sequentially are not, and unlike TFRecord or
// RecordIO the format needs no special tools: `tar`, Python's tarfile and the WebDataset
// library all read it. libarchive does the reading and writing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

struct archive;

namespace dtrain::data {

struct ShardMember {
  std::string extension;  // "jpg", "cls", ... (everything after the key's '.')
  std::vector<std::uint8_t> bytes;
};

// One sample: the members whose names share a key, consecutive in the tar. The key is the
// member name up to the first '.' of its base name (WebDataset's rule: "a/b.seg.png" has
// key "a/b" and extension "seg.png").
struct ShardSample {
  std::string key;
  std::vector<ShardMember> members;
  // The member with this extension, or nullptr.
  const ShardMember* find(std::string_view extension) const;
};

struct ShardInfo {
  std::filesystem::path path;
  std::int64_t samples = 0;
  std::int64_t bytes = 0;  // the file's size
};

// Writes samples into dir/<prefix>-000000.tar, -000001.tar, ..., starting a new shard when
// the next sample would take the current one past max_shard_bytes (a shard holds at least
// one sample). POSIX ustar (pax headers only where a name needs them), members
// "<key>.<extension>", mode 0644, owner 0, a fixed mtime: the same input gives
// byte-identical shards. Each shard is written under a ".partial" name and renamed when
// complete, so that an interrupted run never leaves a short shard that looks whole. The
// folder must not already hold *.tar files (stale shards would be read with the new ones).
// Throws dtrain::Error naming the file on any write error.
class TarShardWriter {
 public:
  TarShardWriter(std::filesystem::path dir, std::int64_t max_shard_bytes, std::string prefix = "shard");
  // Finishes if finish() was not called (errors then only logged), unless a write failed or
  // an exception is unwinding the stack: then the unfinished shard is removed and no
  // shards.txt is written, so the output does not pass for complete.
  ~TarShardWriter();
  TarShardWriter(const TarShardWriter&) = delete;
  TarShardWriter& operator=(const TarShardWriter&) = delete;

  // Throws when the key is empty or has a '.' or the sample has no members, an empty
  // extension or two members with the same extension: such a sample would not read back.
  void write(const ShardSample& sample);
  // Closes the last shard and writes dir/shards.txt ("<file name>\t<samples>\n" per shard).
  std::vector<ShardInfo> finish();

 private:
  void open_shard();
  void close_shard();
  // Drops the shard being written (its .partial file too) after a failure.
  void abandon() noexcept;
  [[noreturn]] void fail_archive(std::string_view what);

  std::filesystem::path dir_;
  std::int64_t max_shard_bytes_;
  std::string prefix_;
  struct archive* archive_ = nullptr;  // the shard being written, or null
  ShardInfo current_;                  // its final path and samples so far
  std::int64_t current_bytes_ = 0;     // its tar bytes so far (headers, padded data)
  std::vector<ShardInfo> done_;
  bool finished_ = false;
  bool failed_ = false;  // a write failed: the output is incomplete and is not finished
  int uncaught_at_construction_;  // to tell a destructor run by an exception
};

// Reads one shard front to back (libarchive streaming; never loads the whole file). Only
// regular-file members count: directory entries are skipped. A truncated or corrupt
// archive, or a member whose name has no key, throws dtrain::Error naming the shard (and
// the member when known). A tar cut exactly between two members cannot be told from a
// complete one (tar's end-of-archive marker is optional); list_shards' counts from
// shards.txt catch that.
class TarShardReader {
 public:
  explicit TarShardReader(const std::filesystem::path& shard);
  ~TarShardReader();
  TarShardReader(const TarShardReader&) = delete;
  TarShardReader& operator=(const TarShardReader&) = delete;

  // The next sample; false at the end of the shard.
  bool next(ShardSample& sample);
  // Skips the next `n` samples without keeping their bytes (reads headers, skips data).
  // Returns how many were skipped (< n at the end).
  std::int64_t skip(std::int64_t n);
  const std::filesystem::path& path() const { return path_; }

 private:
  // Moves to the next regular-file member: its key and extension in pending_*; false at
  // the end.
  bool advance();
  void read_pending_data(std::vector<std::uint8_t>& out);
  [[noreturn]] void fail(std::string_view what) const;

  std::filesystem::path path_;
  struct archive* archive_ = nullptr;
  bool has_pending_ = false;  // a member's header has been read, its data not yet
  bool at_end_ = false;       // libarchive reported the end (asking again is an error)
  std::string pending_name_, pending_key_, pending_extension_;
  std::int64_t pending_size_ = 0;  // from its header
};

// The shards of a split folder: its *.tar files sorted by name, with their sample counts
// from dir/shards.txt when it lists exactly those files, else counted by reading the
// headers (data skipped). Throws naming the folder when it is missing or has no .tar
// files, and naming the shard when one is unreadable or truncated.
std::vector<ShardInfo> list_shards(const std::filesystem::path& dir);

// "256MB", "1GB", "512KB", "1000" (bytes), "1.5GB": decimal units (MB = 10^6) or binary
// ones ("MiB" = 2^20), case-insensitive. Throws naming the text when it is not a positive
// size.
std::int64_t parse_byte_size(const std::string& text);

// classes.txt next to the shards: one class name per line, line i naming label i (a .cls
// member holds the label as decimal text, WebDataset's convention).
void write_class_list(const std::filesystem::path& file, const std::vector<std::string>& classes);
// Throws naming the file when it is missing, unreadable, empty or has an empty or repeated
// name.
std::vector<std::string> read_class_list(const std::filesystem::path& file);

}  // namespace dtrain::data
