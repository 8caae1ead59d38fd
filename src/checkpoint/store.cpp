#include "dtrain/checkpoint/store.h"

#include "dtrain/checkpoint/atomic_file.h"
#include "dtrain/core/error.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

namespace dtrain::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "step-";
constexpr const char* kIncomplete = ".incomplete-";

std::optional<std::int64_t> step_of(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0 || name.size() <= 5) return std::nullopt;
  std::int64_t step = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9' || step > (INT64_MAX - 9) / 10) return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

CheckpointStore::CheckpointStore(fs::path dir) : dir_(std::move(dir)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  DTRAIN_CHECK(!ec && fs::is_directory(dir_), "checkpoint: cannot create the directory {}: {}", dir_.string(),
               ec ? ec.message() : "a file of that name exists");
}

std::string CheckpointStore::name_of(std::int64_t global_step) { return fmt::format("{}{:09d}", kPrefix, global_step); }

fs::path CheckpointStore::incomplete(std::int64_t global_step) const {
  return dir_ / (std::string(kIncomplete) + name_of(global_step));
}

void CheckpointStore::remove_incomplete() const {
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (entry.path().filename().string().rfind(kIncomplete, 0) == 0) fs::remove_all(entry.path());
  }
}

std::vector<RankRecord> CheckpointStore::wait_for_ranks(std::int64_t global_step, int ranks,
                                                        const std::atomic<bool>& cancel,
                                                        const std::vector<int>& absent) const {
  const fs::path dir = incomplete(global_step);
  std::vector<RankRecord> records(static_cast<std::size_t>(ranks));
  std::vector<bool> found(static_cast<std::size_t>(ranks), false);
  int missing = ranks;
  for (int r : absent) {
    if (r < 0 || r >= ranks || found[static_cast<std::size_t>(r)]) continue;
    found[static_cast<std::size_t>(r)] = true;  // not waited for, not returned
    records[static_cast<std::size_t>(r)].rank = -1;
    --missing;
  }
  while (missing > 0) {
    for (int r = 0; r < ranks; ++r) {
      if (found[static_cast<std::size_t>(r)]) continue;
      const fs::path path = dir / fmt::format("rank-{}.json", r);
      if (!fs::exists(path)) continue;  // written atomically: present means whole
      RankRecord record = RankRecord::parse(path.string(), read_text(path));
      DTRAIN_CHECK(record.error.empty(), "checkpoint {}: rank {} could not save: {}", name_of(global_step), r,
                   record.error);
      records[static_cast<std::size_t>(r)] = std::move(record);
      found[static_cast<std::size_t>(r)] = true;
      --missing;
    }
    if (missing == 0) break;
    DTRAIN_CHECK(!cancel.load(), "checkpoint {}: abandoned while waiting for {} rank(s) to finish", name_of(global_step),
                 missing);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::erase_if(records, [](const RankRecord& r) { return r.rank < 0; });
  return records;
}

fs::path CheckpointStore::commit(std::int64_t global_step, const Manifest& manifest, int keep) const {
  const fs::path from = incomplete(global_step);
  const fs::path to = final_path(global_step);
  write_file_atomically(from / "manifest.json", manifest.to_json());
  // A checkpoint of this step from an earlier attempt (one that crashed after committing)
  // is replaced: both hold the same state.
  if (fs::exists(to)) fs::remove_all(to);
  std::error_code ec;
  fs::rename(from, to, ec);
  DTRAIN_CHECK(!ec, "checkpoint: renaming {} to {}: {}", from.string(), to.string(), ec.message());
  fsync_directory(dir_);
  write_file_atomically(dir_ / "latest", name_of(global_step) + "\n");
  if (keep > 0) {
    const std::vector<fs::path> all = list();
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) {
      if (all[i] != to) fs::remove_all(all[i]);
    }
  }
  return to;
}

std::vector<fs::path> CheckpointStore::list() const {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const auto step = step_of(entry.path().filename().string());
    if (step && entry.is_directory() && fs::exists(entry.path() / "manifest.json")) found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

std::optional<fs::path> CheckpointStore::latest() const {
  const fs::path pointer = dir_ / "latest";
  if (fs::exists(pointer)) {
    std::string name = read_text(pointer);
    while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
    if (step_of(name) && fs::exists(dir_ / name / "manifest.json")) return dir_ / name;
  }
  const std::vector<fs::path> all = list();
  if (all.empty()) return std::nullopt;
  return all.back();
}

OpenCheckpoint OpenCheckpoint::open(const fs::path& dir) {
  const fs::path manifest = dir / "manifest.json";
  DTRAIN_CHECK(fs::is_directory(dir), "checkpoint {}: no such directory", dir.string());
  DTRAIN_CHECK(fs::exists(manifest), "checkpoint {}: no manifest.json: not a checkpoint, or one that was never completed",
               dir.string());
  OpenCheckpoint c{.dir = dir, .manifest = Manifest::parse(manifest.string(), read_text(manifest))};
  for (const FileRecord& f : c.manifest.files) {
    const fs::path path = dir / f.name;
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    DTRAIN_CHECK(!ec, "checkpoint {}: file {} is listed in the manifest but missing", dir.string(), f.name);
    DTRAIN_CHECK(size == f.bytes, "checkpoint {}: file {} has {} bytes, the manifest says {} (truncated or replaced)",
                 dir.string(), f.name, size, f.bytes);
  }
  return c;
}

std::vector<FileRecord> OpenCheckpoint::files_starting(const std::string& prefix) const {
  std::vector<FileRecord> out;
  for (const FileRecord& f : manifest.files) {
    if (f.name.rfind(prefix, 0) == 0) out.push_back(f);
  }
  return out;
}

const FileRecord* OpenCheckpoint::find(const std::string& name) const {
  for (const FileRecord& f : manifest.files) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::vector<std::uint8_t> OpenCheckpoint::read_verified(const FileRecord& file) const {
  const fs::path path = dir / file.name;
  std::vector<std::uint8_t> bytes = read_file_bytes(path);
  DTRAIN_CHECK(bytes.size() == file.bytes, "checkpoint {}: file {} has {} bytes, the manifest says {}", dir.string(),
               file.name, bytes.size(), file.bytes);
  Checksum sum;
  sum.update(bytes.data(), bytes.size());
  DTRAIN_CHECK(sum.hex() == file.xxh3, "checkpoint {}: file {} has checksum {}, the manifest says {}: the file is corrupt",
               dir.string(), file.name, sum.hex(), file.xxh3);
  return bytes;
}

}  // namespace dtrain::checkpoint
