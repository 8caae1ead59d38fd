#include "dtrain/data/image_folder_index.h"

#include "dtrain/core/error.h"
#include "dtrain/core/log.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <system_error>

#include <unistd.h>

namespace dtrain::data {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCacheName = ".dtrain-index";
constexpr const char* kCacheMagic = "dtrain-image-folder-index 1";
// A folder modified this recently may change again within the same timestamp tick (file
// systems stamp with a coarse clock), which the recorded time could not show: such a list
// is not cached ("racy git" has the same rule).
constexpr auto kSettled = std::chrono::seconds(2);

bool hidden(const fs::path& p) { return p.filename().string().starts_with('.'); }

std::int64_t mtime_ns(const fs::path& p) {
  std::error_code ec;
  const auto t = fs::last_write_time(p, ec);
  if (ec) return -1;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// The class folders of `root`, sorted, with their modification times: what a cache must match.
std::vector<std::pair<std::string, std::int64_t>> class_folders(const fs::path& root) {
  std::vector<std::pair<std::string, std::int64_t>> folders;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (hidden(it->path()) || !it->is_directory(ec)) continue;
    folders.emplace_back(it->path().filename().string(), mtime_ns(it->path()));
  }
  DTRAIN_CHECK(!ec, "image folder '{}': cannot list it: {}", root.string(), ec.message());
  std::sort(folders.begin(), folders.end());
  return folders;
}

// Where the cached list of `root` lives: inside it when writable, else in the user's cache.
fs::path cache_path(const fs::path& root) {
  if (::access(root.c_str(), W_OK) == 0) return root / kCacheName;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path base = xdg && *xdg ? fs::path(xdg) : home && *home ? fs::path(home) / ".cache" : fs::temp_directory_path();
  const std::size_t hash = std::hash<std::string>{}(fs::absolute(root).lexically_normal().string());
  return base / "dtrain" / fmt::format("image-folder-{:016x}", hash);
}

// The cache's first lines record what it was made from; it is read only when they match.
std::string cache_stamp(const fs::path& root, const std::vector<std::pair<std::string, std::int64_t>>& folders,
                        const std::vector<std::string>& classes) {
  std::ostringstream s;
  // Not the split folder's own time: writing the cache into it changes that. Adding or
  // removing a class folder changes the list below.
  s << kCacheMagic << '\n' << fs::absolute(root).lexically_normal().string() << '\n';
  for (const auto& [name, t] : folders) s << name << '\t' << t << '\n';
  s << "classes";
  for (const auto& c : classes) s << '\t' << c;
  s << "\nentries\n";
  return s.str();
}

bool read_cache(const fs::path& file, const std::string& stamp, ImageFolderIndex& index) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return false;
  std::string head(stamp.size(), '\0');
  if (!in.read(head.data(), static_cast<std::streamsize>(head.size())) || head != stamp) return false;
  std::vector<ImageFolderIndex::Entry> entries;
  std::string line;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    if (tab == std::string::npos) return false;
    entries.push_back({line.substr(tab + 1), static_cast<std::int32_t>(std::strtol(line.c_str(), nullptr, 10))});
  }
  index.entries = std::move(entries);
  return true;
}

bool settled(const std::vector<std::pair<std::string, std::int64_t>>& folders) {
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               fs::file_time_type::clock::now().time_since_epoch())
                               .count();
  const std::int64_t limit = now - std::chrono::duration_cast<std::chrono::nanoseconds>(kSettled).count();
  for (const auto& f : folders) {
    if (f.second > limit) return false;
  }
  return true;
}

void write_cache(const fs::path& file, const std::string& stamp, const ImageFolderIndex& index) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  const fs::path temporary = file.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return;  // a cache we cannot write only costs the next run a listing
    out << stamp;
    for (const auto& e : index.entries) out << e.label << '\t' << e.path << '\n';
    if (!out) return;
  }
  fs::rename(temporary, file, ec);  // atomic: ranks listing the same folder at once never read half a file
}

}  // namespace

ImageFolderIndex index_image_folder(const fs::path& split_dir, const std::vector<std::string>& classes) {
  std::error_code ec;
  DTRAIN_CHECK(fs::is_directory(split_dir, ec), "image folder '{}': not a directory (expected <split>/<class>/<image>)",
               split_dir.string());
  const auto folders = class_folders(split_dir);
  DTRAIN_CHECK(!folders.empty(), "image folder '{}': no class folders in it (expected <split>/<class>/<image>)",
               split_dir.string());
  ImageFolderIndex index;
  index.root = split_dir;
  if (classes.empty()) {
    for (const auto& f : folders) index.classes.push_back(f.first);
  } else {
    index.classes = classes;
  }
  std::map<std::string, std::int32_t> label_of;
  for (std::size_t i = 0; i < index.classes.size(); ++i) label_of[index.classes[i]] = static_cast<std::int32_t>(i);
  for (const auto& f : folders) {
    DTRAIN_CHECK(label_of.count(f.first), "image folder '{}': class folder '{}' is not one of the {} training classes",
                 split_dir.string(), f.first, index.classes.size());
  }

  const fs::path cache = cache_path(split_dir);
  const std::string stamp = cache_stamp(split_dir, folders, index.classes);
  if (!read_cache(cache, stamp, index)) {
    for (const auto& [name, t] : folders) {
      const std::size_t first = index.entries.size();
      for (fs::directory_iterator it(split_dir / name, ec), end; !ec && it != end; it.increment(ec)) {
        if (hidden(it->path()) || it->is_directory(ec)) continue;
        index.entries.push_back({name + "/" + it->path().filename().string(), label_of[name]});
      }
      DTRAIN_CHECK(!ec, "image folder '{}': cannot list class folder '{}': {}", split_dir.string(), name, ec.message());
      std::sort(index.entries.begin() + static_cast<std::ptrdiff_t>(first), index.entries.end(),
                [](const auto& a, const auto& b) { return a.path < b.path; });
    }
    if (settled(folders)) write_cache(cache, stamp, index);
  }
  std::vector<std::int64_t> per_class(index.classes.size(), 0);
  for (const auto& e : index.entries) ++per_class[static_cast<std::size_t>(e.label)];
  for (std::size_t i = 0; i < per_class.size(); ++i) {
    if (per_class[i] == 0) index.empty_classes.push_back(index.classes[i]);
  }
  return index;
}

}  // namespace dtrain::data
