// Text corpora: a file, a gzip or dictzip file (.gz, .dz), or a folder of them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace dtrain::text {

// The files of a corpus: `path` itself when it is a file (whatever it holds); for a folder, its
// regular files (not its subfolders) in sorted name order, leaving out hidden files, fortune's
// binary indexes (*.dat) and its *.u8 links and copies (each duplicates a text file), and any
// file that is not text: one with a NUL byte in its first 8 KiB, unless named .gz or .dz. A
// missing path, or a folder with no text file, is an error naming it.
std::vector<std::filesystem::path> corpus_files(const std::filesystem::path& path);

// A corpus file's bytes; .gz and .dz files (gzip, of which dictzip is a kind) are decompressed,
// every member. An unreadable, truncated or corrupt file is an error naming it.
std::string read_corpus_file(const std::filesystem::path& file);

}  // namespace dtrain::text
