// Builders for small IDX (MNIST-format) files and gzip files in the data tests.
#pragma once

#include "support/test_support.h"

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace dtrain::test {

inline std::string be32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

inline std::string idx_images(std::uint32_t count, std::uint32_t rows, std::uint32_t cols,
                              const std::vector<std::uint8_t>& pixels, std::uint32_t magic = 0x00000803) {
  return be32(magic) + be32(count) + be32(rows) + be32(cols) + std::string(pixels.begin(), pixels.end());
}

inline std::string idx_labels(const std::vector<std::uint8_t>& labels, std::uint32_t magic = 0x00000801) {
  return be32(magic) + be32(static_cast<std::uint32_t>(labels.size())) + std::string(labels.begin(), labels.end());
}

// Writes `bytes` gzip-compressed, as one gzip member.
inline void write_gzip(const std::filesystem::path& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs f, which must throw dtrain::Error whose message contains every one of `parts`.
template <class F>
void require_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    INFO("message: " << e.message());
    for (const auto& part : parts) {
      INFO("expected to contain: " << part);
      CHECK(e.message().find(part) != std::string::npos);
    }
    return;
  }
  FAIL("expected a dtrain::Error");
}

}  // namespace dtrain::test
