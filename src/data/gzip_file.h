// Whole-file reads for the dataset readers, with gzip decompression through zlib.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace dtrain::data {

// The bytes of `path`; a name ending in ".gz" is decompressed (all concatenated gzip
// members). Throws dtrain::Error naming the file when it cannot be read, is not gzip
// data, or is truncated or corrupt (with zlib's explanation).
std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path);

}  // namespace dtrain::data
