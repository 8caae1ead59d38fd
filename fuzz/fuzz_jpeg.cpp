// The JPEG decoder as the image pipeline calls it on a file's bytes: the header alone, a
// full decode, a decode at the smallest DCT scale, and a part of the image at a scale and
// crop that the input's last byte picks (the training crops' path).
#include "fuzz_support.h"

#include "dtrain/core/error.h"
#include "dtrain/data/jpeg.h"

#include <cstdint>
#include <string>

namespace {

using dtrain::data::Image;
using dtrain::fuzz::expect;

// Decoding costs time and memory in proportion to the pixels the header promises, and the
// reader accepts up to 2^28 of them (a photograph's worth, legitimately): an input of a few
// bytes could make every run a second long. Like libjpeg-turbo's own fuzzers, only headers
// are read for larger images.
constexpr std::int64_t kMaxDecodedPixels = std::int64_t{1} << 20;
constexpr const char* kName = "fuzz.jpg";

void expect_rgb(const Image& image, int width, int height) {
  expect(image.width == width && image.height == height, "a decode has the promised size");
  expect(image.pixels.size() == std::size_t{3} * width * height, "a decoded image holds width * height RGB pixels");
}

std::string size_text(int width, int height) { return std::to_string(width) + "x" + std::to_string(height); }

template <class Decode>
void attempt(const Decode& decode) {
  try {
    dtrain::fuzz::accepted(decode());
  } catch (const dtrain::Error& e) {
    dtrain::fuzz::rejected(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dtrain::data;
  dtrain::data::JpegInfo info;
  try {
    info = read_jpeg_info(data, size, kName);
  } catch (const dtrain::Error& e) {
    dtrain::fuzz::rejected(e);
    return 0;
  }
  expect(info.width >= 1 && info.height >= 1, "an accepted header has a positive size");
  if (std::int64_t{info.width} * info.height > kMaxDecodedPixels) return 0;

  attempt([&] {
    expect_rgb(decode_jpeg(data, size, kName), info.width, info.height);
    return "full decode, " + size_text(info.width, info.height);
  });
  attempt([&] {
    const Image small = decode_jpeg(data, size, kName, 1, 1);
    expect_rgb(small, jpeg_scaled_size(info.width, 1), jpeg_scaled_size(info.height, 1));
    return "decode at 1/8, " + size_text(small.width, small.height);
  });
  attempt([&] {
    // The middle half of the image in each direction, at a scale k/8 that varies with the input.
    const int k = 1 + static_cast<int>(size % 8);
    const int w = jpeg_scaled_size(info.width, k), h = jpeg_scaled_size(info.height, k);
    const int x0 = w / 4, y0 = h / 4, x1 = w - w / 4, y1 = h - h / 4;
    const JpegRegion r = decode_jpeg_region(data, size, kName, k, x0, y0, x1, y1);
    expect(r.scaled_width == w && r.scaled_height == h, "a region's scaled size is jpeg_scaled_size's");
    expect(r.x <= x0 && r.x + r.image.width >= x1 && r.y == y0 && r.image.height == y1 - y0,
           "a region covers the part asked for");
    expect_rgb(r.image, r.image.width, r.image.height);
    return "region at " + std::to_string(k) + "/8, " + size_text(r.image.width, r.image.height);
  });
  return 0;
}
