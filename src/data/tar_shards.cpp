#include "dtrain/data/tar_shards.h"

#include "dtrain/core/error.h"

#include <archive.h>
#include <archive_entry.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <limits>
#include <utility>

namespace dtrain::data {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kTarBlock = 512;
constexpr std::int64_t kEndOfArchive = 2 * kTarBlock;  // two zero blocks close a tar
constexpr std::size_t kUstarNameMax = 100;             // longer names need a pax header
// A fixed modification time for every member, so that the same samples give the same bytes
// (2000-01-01T00:00:00Z rather than 0, which some tools show as "no date").
constexpr std::time_t kMemberMtime = 946684800;
// Write and read in large blocks: shards live on file systems that favour big sequential I/O.
constexpr std::size_t kIoBlock = 1 << 20;
// Reserve at most this much ahead for a member: a corrupt size field must not allocate gigabytes.
constexpr std::int64_t kMaxReserve = 64 << 20;
constexpr const char* kShardList = "shards.txt";

std::int64_t padded(std::int64_t n) { return (n + kTarBlock - 1) / kTarBlock * kTarBlock; }

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// The tar bytes of one member: its header, a pax extended header (a header block and one
// of data) when the name does not fit ustar, and its data padded to whole blocks.
std::int64_t member_bytes(const std::string& name, std::size_t size) {
  const bool pax = name.size() > kUstarNameMax || !is_ascii(name);
  return kTarBlock + (pax ? 2 * kTarBlock : 0) + padded(static_cast<std::int64_t>(size));
}

// WebDataset's rule: the key is the name up to the first '.' of its base name, the extension
// the rest. False when the base name has no '.' or starts with one (no key).
bool split_member_name(std::string_view name, std::string& key, std::string& extension) {
  const std::size_t slash = name.rfind('/');
  const std::size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  const std::size_t dot = name.find('.', base);
  if (dot == std::string_view::npos || dot == base) return false;
  key.assign(name.substr(0, dot));
  extension.assign(name.substr(dot + 1));
  return true;
}

fs::path partial_path(const fs::path& shard) { return fs::path(shard.string() + ".partial"); }

std::vector<fs::path> tar_files(const fs::path& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  DTRAIN_CHECK(!ec, "cannot list '{}': {}", dir.string(), ec.message());
  std::vector<fs::path> files;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (it->path().extension() == ".tar" && it->is_regular_file(ec)) files.push_back(it->path());
  }
  DTRAIN_CHECK(!ec, "cannot list '{}': {}", dir.string(), ec.message());
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
  return files;
}

// dir/shards.txt as (file name, samples) pairs; empty when missing or malformed.
std::vector<std::pair<std::string, std::int64_t>> read_shard_list(const fs::path& file) {
  std::vector<std::pair<std::string, std::int64_t>> listed;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t tab = line.find('\t');
    std::int64_t samples = -1;
    if (tab == std::string::npos) return {};
    const char* end = line.data() + line.size();
    const auto [ptr, ec] = std::from_chars(line.data() + tab + 1, end, samples);
    if (ec != std::errc() || ptr != end || samples < 0) return {};
    listed.emplace_back(line.substr(0, tab), samples);
  }
  return listed;
}

}  // namespace

const ShardMember* ShardSample::find(std::string_view extension) const {
  for (const auto& m : members)
    if (m.extension == extension) return &m;
  return nullptr;
}

// ---- TarShardWriter ---------------------------------------------------------------------

TarShardWriter::TarShardWriter(fs::path dir, std::int64_t max_shard_bytes, std::string prefix)
    : dir_(std::move(dir)), max_shard_bytes_(max_shard_bytes), prefix_(std::move(prefix)),
      uncaught_at_construction_(std::uncaught_exceptions()) {
  DTRAIN_CHECK(max_shard_bytes_ > 0, "TarShardWriter: max_shard_bytes must be positive, got {}", max_shard_bytes_);
  DTRAIN_CHECK(!prefix_.empty() && prefix_.find('/') == std::string::npos,
               "TarShardWriter: prefix '{}' must be a non-empty file name prefix", prefix_);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  DTRAIN_CHECK(!ec && fs::is_directory(dir_), "TarShardWriter: cannot create the folder '{}': {}", dir_.string(),
               ec ? ec.message() : "a file has that name");
  const std::vector<fs::path> existing = tar_files(dir_);
  DTRAIN_CHECK(existing.empty(),
               "TarShardWriter: '{}' already holds tar shards ('{}'{}): remove them or write elsewhere (stale shards "
               "would be read with the new ones)",
               dir_.string(), existing.front().filename().string(),
               existing.size() > 1 ? fmt::format(" and {} more", existing.size() - 1) : "");
}

TarShardWriter::~TarShardWriter() {
  if (finished_) return;
  if (failed_ || std::uncaught_exceptions() > uncaught_at_construction_) {
    abandon();
    return;
  }
  try {
    finish();
  } catch (const std::exception& e) {
    spdlog::error("TarShardWriter: finishing '{}': {}", dir_.string(), e.what());
  }
}

void TarShardWriter::write(const ShardSample& sample) {
  DTRAIN_CHECK(!finished_, "TarShardWriter::write: '{}' is already finished", dir_.string());
  DTRAIN_CHECK(!failed_, "TarShardWriter::write: an earlier write in '{}' failed", dir_.string());
  const std::size_t slash = sample.key.rfind('/');
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  DTRAIN_CHECK(base < sample.key.size() && sample.key.find('.', base) == std::string::npos,
               "TarShardWriter::write: key '{}' must be non-empty with no '.' in its base name (the key ends at the "
               "first '.')",
               sample.key);
  DTRAIN_CHECK(!sample.members.empty(), "TarShardWriter::write: sample '{}' has no members", sample.key);
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < sample.members.size(); ++i) {
    const ShardMember& m = sample.members[i];
    DTRAIN_CHECK(!m.extension.empty() && m.extension.find('/') == std::string::npos,
                 "TarShardWriter::write: sample '{}' member {}: extension '{}' must be non-empty without '/'",
                 sample.key, i, m.extension);
    for (std::size_t j = 0; j < i; ++j)
      DTRAIN_CHECK(sample.members[j].extension != m.extension,
                   "TarShardWriter::write: sample '{}' has two '{}' members", sample.key, m.extension);
    bytes += member_bytes(sample.key + "." + m.extension, m.bytes.size());
  }

  if (archive_ && current_.samples > 0 && current_bytes_ + bytes + kEndOfArchive > max_shard_bytes_) close_shard();
  if (!archive_) open_shard();

  for (const ShardMember& m : sample.members) {
    const std::string name = sample.key + "." + m.extension;
    archive_entry* entry = archive_entry_new();
    DTRAIN_CHECK(entry != nullptr, "TarShardWriter: out of memory for a tar entry");
    archive_entry_set_pathname(entry, name.c_str());
    archive_entry_set_size(entry, static_cast<la_int64_t>(m.bytes.size()));
    archive_entry_set_filetype(entry, AE_IFREG);
    archive_entry_set_perm(entry, 0644);
    archive_entry_set_mtime(entry, kMemberMtime, 0);
    const int header = archive_write_header(archive_, entry);
    archive_entry_free(entry);
    if (header != ARCHIVE_OK) fail_archive(fmt::format("writing the header of '{}' to", name));
    if (!m.bytes.empty() &&
        archive_write_data(archive_, m.bytes.data(), m.bytes.size()) != static_cast<la_ssize_t>(m.bytes.size()))
      fail_archive(fmt::format("writing '{}' to", name));
    if (archive_write_finish_entry(archive_) != ARCHIVE_OK) fail_archive(fmt::format("writing '{}' to", name));
  }
  ++current_.samples;
  current_bytes_ += bytes;
}

std::vector<ShardInfo> TarShardWriter::finish() {
  DTRAIN_CHECK(!finished_, "TarShardWriter::finish: '{}' is already finished", dir_.string());
  DTRAIN_CHECK(!failed_, "TarShardWriter::finish: an earlier write in '{}' failed: its shards are incomplete",
               dir_.string());
  if (archive_) close_shard();
  const fs::path list = dir_ / kShardList;
  std::ofstream out(list, std::ios::trunc);
  for (const ShardInfo& s : done_) out << s.path.filename().string() << '\t' << s.samples << '\n';
  out.close();
  DTRAIN_CHECK(out.good(), "TarShardWriter: cannot write '{}'", list.string());
  finished_ = true;
  return done_;
}

void TarShardWriter::open_shard() {
  current_ = ShardInfo{dir_ / fmt::format("{}-{:06d}.tar", prefix_, done_.size())};
  current_bytes_ = 0;
  archive_ = archive_write_new();
  DTRAIN_CHECK(archive_ != nullptr, "TarShardWriter: out of memory for a tar writer");
  // pax_restricted writes plain ustar headers and adds pax ones only for what ustar cannot
  // hold (long or non-ASCII names), which every tar reader understands.
  if (archive_write_set_format_pax_restricted(archive_) != ARCHIVE_OK ||
      archive_write_add_filter_none(archive_) != ARCHIVE_OK ||
      archive_write_set_bytes_per_block(archive_, static_cast<int>(kIoBlock)) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(archive_, 1) != ARCHIVE_OK)  // no padding after the end marker
    fail_archive("setting up");
  if (archive_write_open_filename(archive_, partial_path(current_.path).c_str()) != ARCHIVE_OK)
    fail_archive("opening");
}

void TarShardWriter::close_shard() {
  if (archive_write_close(archive_) != ARCHIVE_OK) fail_archive("closing");
  archive_write_free(archive_);
  archive_ = nullptr;
  std::error_code ec;
  fs::rename(partial_path(current_.path), current_.path, ec);
  if (!ec) current_.bytes = static_cast<std::int64_t>(fs::file_size(current_.path, ec));
  if (ec) {
    failed_ = true;
    fs::remove(partial_path(current_.path), ec);
    DTRAIN_FAIL("TarShardWriter: cannot move '{}' into place: {}", current_.path.string(), ec.message());
  }
  done_.push_back(current_);
}

void TarShardWriter::abandon() noexcept {
  if (!archive_) return;
  archive_write_free(archive_);
  archive_ = nullptr;
  std::error_code ec;
  fs::remove(partial_path(current_.path), ec);
}

void TarShardWriter::fail_archive(std::string_view what) {
  const char* reason = archive_ ? archive_error_string(archive_) : nullptr;
  const std::string message = fmt::format("TarShardWriter: {} '{}': {}", what, partial_path(current_.path).string(),
                                          reason ? reason : "unknown error");
  abandon();
  failed_ = true;
  throw Error(message);
}

// ---- TarShardReader ---------------------------------------------------------------------

TarShardReader::TarShardReader(const fs::path& shard) : path_(shard) {
  std::error_code ec;
  DTRAIN_CHECK(fs::is_regular_file(shard, ec), "tar shard '{}': no such file", shard.string());
  archive_ = archive_read_new();
  DTRAIN_CHECK(archive_ != nullptr, "tar shard '{}': out of memory for a tar reader", shard.string());
  archive_read_support_format_tar(archive_);  // ustar, pax and GNU tar
  if (archive_read_open_filename(archive_, shard.c_str(), kIoBlock) != ARCHIVE_OK) {
    const std::string reason = archive_error_string(archive_) ? archive_error_string(archive_) : "unknown error";
    archive_read_free(archive_);
    DTRAIN_FAIL("tar shard '{}': cannot open: {}", shard.string(), reason);
  }
}

TarShardReader::~TarShardReader() { archive_read_free(archive_); }

bool TarShardReader::next(ShardSample& sample) {
  if (!has_pending_ && !advance()) return false;
  sample.key = pending_key_;
  std::size_t used = 0;  // members are reused, so that their buffers keep their capacity
  do {
    if (used == sample.members.size()) sample.members.emplace_back();
    ShardMember& m = sample.members[used++];
    m.extension = pending_extension_;
    read_pending_data(m.bytes);
  } while (advance() && pending_key_ == sample.key);
  sample.members.resize(used);
  return true;
}

std::int64_t TarShardReader::skip(std::int64_t n) {
  DTRAIN_CHECK(n >= 0, "TarShardReader::skip: n must be non-negative, got {}", n);
  std::int64_t skipped = 0;
  std::string key;
  while (skipped < n && (has_pending_ || advance())) {
    key = pending_key_;
    do {
      // On a seekable file libarchive seeks over the data; past the end it reads, and
      // reports the truncation.
      if (archive_read_data_skip(archive_) != ARCHIVE_OK) fail(fmt::format("skipping member '{}'", pending_name_));
      has_pending_ = false;
    } while (advance() && pending_key_ == key);
    ++skipped;
  }
  return skipped;
}

bool TarShardReader::advance() {
  has_pending_ = false;
  while (!at_end_) {
    archive_entry* entry = nullptr;
    const int r = archive_read_next_header(archive_, &entry);
    if (r == ARCHIVE_EOF) {
      at_end_ = true;
      break;
    }
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
      fail(pending_name_.empty() ? std::string("reading the first member header")
                                 : fmt::format("reading the member header after '{}'", pending_name_));
    if (archive_entry_filetype(entry) != AE_IFREG) continue;
    const char* name = archive_entry_pathname(entry);
    if (name == nullptr) fail("reading a member name");
    pending_name_ = name;
    DTRAIN_CHECK(split_member_name(pending_name_, pending_key_, pending_extension_),
                 "tar shard '{}': member '{}' has no key: expected '<key>.<extension>' (WebDataset's naming)",
                 path_.string(), pending_name_);
    pending_size_ = archive_entry_size_is_set(entry) ? archive_entry_size(entry) : 0;
    has_pending_ = true;
    return true;
  }
  return false;
}

void TarShardReader::read_pending_data(std::vector<std::uint8_t>& out) {
  out.clear();
  out.reserve(static_cast<std::size_t>(std::clamp<std::int64_t>(pending_size_, 0, kMaxReserve)));
  for (;;) {
    const void* block = nullptr;
    std::size_t size = 0;
    la_int64_t offset = 0;
    const int r = archive_read_data_block(archive_, &block, &size, &offset);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) fail(fmt::format("reading member '{}'", pending_name_));
    // Blocks come in order; a sparse member (never written by TarShardWriter) leaves gaps of zeros.
    // Its map of blocks comes from the file, unchecked by libarchive against the member's size,
    // and a gap is memory that the file does not back: unchecked, a corrupt map (or size) would
    // allocate whatever it claims.
    DTRAIN_CHECK(offset >= 0 && offset + static_cast<std::int64_t>(size) <= pending_size_,
                 "tar shard '{}': member '{}' has data at bytes [{}, {}), outside its {} bytes (a corrupt sparse map)",
                 path_.string(), pending_name_, offset, offset + static_cast<std::int64_t>(size), pending_size_);
    if (static_cast<std::size_t>(offset) > out.size()) {
      std::error_code ec;
      const auto shard_bytes = static_cast<std::int64_t>(fs::file_size(path_, ec));
      DTRAIN_CHECK(!ec, "tar shard '{}': {}", path_.string(), ec.message());
      DTRAIN_CHECK(pending_size_ <= shard_bytes,
                   "tar shard '{}': member '{}' is a sparse file of {} bytes, more than the whole shard ({} bytes): a "
                   "corrupt size (samples are plain files)",
                   path_.string(), pending_name_, pending_size_, shard_bytes);
    }
    const auto end = static_cast<std::size_t>(offset) + size;
    if (end > out.size()) out.resize(end);
    if (size > 0) std::memcpy(out.data() + offset, block, size);
  }
  has_pending_ = false;
}

void TarShardReader::fail(std::string_view what) const {
  const char* reason = archive_error_string(archive_);
  DTRAIN_FAIL("tar shard '{}': {}: {}", path_.string(), what, reason ? reason : "unknown error");
}

// ---- Folders, sizes, class lists --------------------------------------------------------

std::vector<ShardInfo> list_shards(const fs::path& dir) {
  std::error_code ec;
  DTRAIN_CHECK(fs::is_directory(dir, ec), "shards: '{}' is not a directory", dir.string());
  const std::vector<fs::path> files = tar_files(dir);
  DTRAIN_CHECK(!files.empty(), "shards: no .tar files in '{}'", dir.string());

  std::vector<ShardInfo> shards;
  for (const fs::path& f : files) {
    const auto bytes = fs::file_size(f, ec);
    DTRAIN_CHECK(!ec, "tar shard '{}': {}", f.string(), ec.message());
    shards.push_back(ShardInfo{f, -1, static_cast<std::int64_t>(bytes)});
  }
  const fs::path list_file = dir / kShardList;
  auto listed = read_shard_list(list_file);
  std::sort(listed.begin(), listed.end());
  const bool matches = listed.size() == shards.size() &&
                       std::equal(listed.begin(), listed.end(), shards.begin(), [](const auto& l, const ShardInfo& s) {
                         return l.first == s.path.filename().string();
                       });
  if (matches) {
    for (std::size_t i = 0; i < shards.size(); ++i) shards[i].samples = listed[i].second;
    return shards;
  }
  if (fs::exists(list_file, ec))
    spdlog::warn("'{}' does not list exactly the .tar files of '{}': counting their samples instead",
                 list_file.string(), dir.string());
  for (ShardInfo& s : shards) {
    TarShardReader reader(s.path);
    s.samples = reader.skip(std::numeric_limits<std::int64_t>::max());
  }
  return shards;
}

std::int64_t parse_byte_size(const std::string& text) {
  static constexpr std::pair<std::string_view, long double> kUnits[] = {
      {"", 1},        {"b", 1},          {"kb", 1e3L},          {"mb", 1e6L},           {"gb", 1e9L},
      {"tb", 1e12L},  {"kib", 1024.0L},  {"mib", 1048576.0L},   {"gib", 1073741824.0L}, {"tib", 1099511627776.0L}};
  const auto fail = [&]() -> std::int64_t {
    DTRAIN_FAIL(
        "'{}' is not a byte size: expected a positive number with an optional unit B, KB, MB, GB, TB (powers of "
        "1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g. 256MB",
        text);
  };
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const std::string number = text.substr(0, i);
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1 || number == ".") return fail();
  while (i < text.size() && text[i] == ' ') ++i;
  std::string unit = text.substr(i);
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  const auto* u = std::find_if(std::begin(kUnits), std::end(kUnits), [&](const auto& p) { return p.first == unit; });
  if (u == std::end(kUnits)) return fail();
  const long double bytes = std::floor(std::strtold(number.c_str(), nullptr) * u->second);
  if (!(bytes >= 1 && bytes <= static_cast<long double>(std::numeric_limits<std::int64_t>::max() / 2))) return fail();
  return static_cast<std::int64_t>(bytes);
}

void write_class_list(const fs::path& file, const std::vector<std::string>& classes) {
  std::ofstream out(file, std::ios::trunc);
  for (const auto& name : classes) {
    DTRAIN_CHECK(!name.empty() && name.find_first_of("\r\n") == std::string::npos,
                 "write_class_list: '{}': class name '{}' must be non-empty, on one line", file.string(), name);
    out << name << '\n';
  }
  out.close();
  DTRAIN_CHECK(out.good(), "write_class_list: cannot write '{}'", file.string());
}

std::vector<std::string> read_class_list(const fs::path& file) {
  std::ifstream in(file);
  DTRAIN_CHECK(in.is_open(), "class list '{}': cannot open it", file.string());
  std::vector<std::string> classes;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    DTRAIN_CHECK(!line.empty(), "class list '{}': line {} is empty: expected one class name per line", file.string(),
                 classes.size() + 1);
    DTRAIN_CHECK(std::find(classes.begin(), classes.end(), line) == classes.end(),
                 "class list '{}': class '{}' is listed twice (lines {} and {})", file.string(), line,
                 std::find(classes.begin(), classes.end(), line) - classes.begin() + 1, classes.size() + 1);
    classes.push_back(line);
  }
  DTRAIN_CHECK(in.eof(), "class list '{}': read error", file.string());
  DTRAIN_CHECK(!classes.empty(), "class list '{}' is empty: expected one class name per line", file.string());
  return classes;
}

}  // namespace dtrain::data
