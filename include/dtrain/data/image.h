// Images as the data pipeline handles them between decoding and the last transform: 8-bit
// RGB, interleaved, row-major (height x width x 3). They stay 8-bit through cropping,
// resizing and flipping, and become normalized floats only at the end (a quarter of the
// memory traffic of carrying floats through every step).
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::data {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> pixels;  // height * width * 3 bytes: R, G, B per pixel

  static Image blank(int width, int height) {
    return {width, height, std::vector<std::uint8_t>(static_cast<std::size_t>(width) * height * 3)};
  }
  std::uint8_t* row(int y) { return pixels.data() + static_cast<std::size_t>(y) * width * 3; }
  const std::uint8_t* row(int y) const { return pixels.data() + static_cast<std::size_t>(y) * width * 3; }
};

}  // namespace dtrain::data
