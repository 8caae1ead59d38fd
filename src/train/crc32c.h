// CRC-32C (Castagnoli), the checksum of TFRecord files (TensorBoard's event files).
// Written here, in a few table-driven lines, because Debian 12 packages no C/C++ CRC32C
// library (no libcrc32c; abseil's crc32c arrived after bookworm's abseil), and a copy of
// one (google/crc32c) would add a vendored build for a 256-entry table and a loop.
// Event files are small, so the byte-at-a-time loop is fast enough.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dtrain::train::crc32c {

std::uint32_t compute(const void* data, std::size_t size);

// TFRecord stores CRCs "masked" (rotated and offset), so that a CRC of data that itself
// holds CRCs stays well distributed.
inline std::uint32_t mask(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace dtrain::train::crc32c
