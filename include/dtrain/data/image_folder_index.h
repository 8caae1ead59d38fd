// The file list of an ImageFolder split (root/<class>/<file>), as torchvision's ImageFolder
// reads it: classes are the sub-folders sorted by name, labels their positions, samples
// every regular, non-hidden file under a class folder (sorted by path). Listing millions
// of files is slow on shared file systems, so the list is cached (see index_image_folder).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dtrain::data {

struct ImageFolderIndex {
  struct Entry {
    std::string path;  // relative to the split folder: "<class>/<file>"
    std::int32_t label = 0;
  };
  std::filesystem::path root;        // the split folder
  std::vector<std::string> classes;  // sorted
  std::vector<Entry> entries;        // sorted by class, then file name
  std::vector<std::string> empty_classes;  // class folders that hold no files
};

// Lists `split_dir`, or reads the cached list when one is up to date. The cache is
// "<split_dir>/.dtrain-index" when the folder is writable, else a file under
// $XDG_CACHE_HOME/dtrain (or ~/.cache/dtrain) named after the folder's absolute path; it is
// up to date when the split folder's and every class folder's modification times match
// the ones it recorded (a folder modified in the last two seconds is not cached, since a
// change within the same timestamp tick would go unseen). `classes`, when not empty, fixes the class list and labels (a
// validation split takes the training split's): a folder not in it is an error, and a
// class in it without a folder has no samples. Throws dtrain::Error naming the folder when
// it is missing, unreadable or has no class folders.
ImageFolderIndex index_image_folder(const std::filesystem::path& split_dir,
                                    const std::vector<std::string>& classes = {});

}  // namespace dtrain::data
