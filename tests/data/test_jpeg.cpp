#include "data/idx_files.h"
#include "dtrain/core/error.h"
#include "dtrain/data/image_transforms.h"
#include "dtrain/data/jpeg.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>  // jpeglib.h needs FILE declared first
#include <cstdlib>
#include <string>
#include <vector>

#include <jpeglib.h>

using namespace dtrain;
using namespace dtrain::data;
using dtrain::test::require_error;

namespace {

// Smooth colour ramps with a dark corner, so that every channel and the black ink of the CMYK
// path vary across the image and JPEG can encode it well.
Image gradient(int width, int height) {
  Image im = Image::blank(width, height);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      std::uint8_t* p = im.row(y) + 3 * x;
      const double u = double(x) / width, v = double(y) / height;
      p[0] = static_cast<std::uint8_t>(20 + 215 * u);
      p[1] = static_cast<std::uint8_t>(230 - 200 * v);
      p[2] = static_cast<std::uint8_t>(60 + 160 * u * v);
      const double shade = 0.25 + 0.75 * std::min(1.0, u + v);  // darker towards (0, 0)
      for (int c = 0; c < 3; ++c) p[c] = static_cast<std::uint8_t>(p[c] * shade);
    }
  return im;
}

double psnr(const Image& a, const Image& b) {
  REQUIRE(a.width == b.width);
  REQUIRE(a.height == b.height);
  double se = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) {
    const double d = double(a.pixels[i]) - b.pixels[i];
    se += d * d;
  }
  const double mse = se / a.pixels.size();
  return mse == 0 ? 99 : 10 * std::log10(255.0 * 255.0 / mse);
}

double mean_abs_diff(const Image& a, const Image& b) {
  REQUIRE(a.width == b.width);
  REQUIRE(a.height == b.height);
  double sum = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) sum += std::abs(double(a.pixels[i]) - b.pixels[i]);
  return sum / a.pixels.size();
}

Image decode(const std::vector<std::uint8_t>& bytes, const std::string& name = "test.jpg") {
  return decode_jpeg(bytes.data(), bytes.size(), name);
}

// The whole image at scale k/8 (decode_jpeg itself only picks kJpegScales).
Image full_decode_at(const std::vector<std::uint8_t>& bytes, int k) {
  return decode_jpeg_region(bytes.data(), bytes.size(), "full.jpg", k, 0, 0, 1 << 20, 1 << 20).image;
}

// A progressive JPEG, which our encoder does not write, through libjpeg directly: progressive
// files are decoded from a whole-image coefficient buffer, a different path through libjpeg.
std::vector<std::uint8_t> encode_progressive(const Image& image) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buffer, &size);
  c.image_width = image.width;
  c.image_height = image.height;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 90, TRUE);
  jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  for (int y = 0; y < image.height; ++y) {
    JSAMPROW row = const_cast<std::uint8_t*>(image.row(y));
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::vector<std::uint8_t> out(buffer, buffer + size);
  std::free(buffer);
  return out;
}

// The bytes without the Adobe APP14 segment (FF EE, then a big-endian length that counts itself).
std::vector<std::uint8_t> without_adobe_marker(std::vector<std::uint8_t> bytes) {
  for (std::size_t i = 2; i + 4 < bytes.size(); ++i)
    if (bytes[i] == 0xff && bytes[i + 1] == 0xee) {
      const std::size_t length = bytes[i + 2] * 256u + bytes[i + 3];
      bytes.erase(bytes.begin() + i, bytes.begin() + i + 2 + length);
      return bytes;
    }
  FAIL("no Adobe marker");
  return bytes;
}

std::vector<std::uint8_t> pseudo_random_bytes(std::size_t n, std::uint64_t x) {
  std::vector<std::uint8_t> out(n);
  for (auto& b : out) {  // xorshift64
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::uint8_t>(x >> 24);
  }
  return out;
}

}  // namespace

TEST_CASE("encode_jpeg and decode_jpeg round-trip a smooth colour image", "[cpu][data]") {
  const Image source = gradient(97, 61);  // odd sizes: partial 16x16 blocks at the edges
  const auto bytes = encode_jpeg(source, 95);
  REQUIRE(bytes.size() > 2);
  CHECK((bytes[0] == 0xff && bytes[1] == 0xd8));
  const JpegInfo info = read_jpeg_info(bytes.data(), bytes.size(), "ramp.jpg");
  CHECK(info.width == 97);
  CHECK(info.height == 61);
  CHECK(info.components == 3);
  const Image decoded = decode(bytes);
  REQUIRE(decoded.width == 97);
  REQUIRE(decoded.height == 61);
  CHECK(psnr(decoded, source) > 30);
  // Lower quality, smaller file, still the same picture.
  const auto small = encode_jpeg(source, 40);
  CHECK(small.size() < bytes.size());
  CHECK(psnr(decode(small), source) > 25);
}

TEST_CASE("grayscale JPEGs decode to equal R, G and B", "[cpu][data]") {
  const Image source = gradient(64, 48);
  const auto bytes = encode_jpeg(source, 95, /*grayscale=*/true);
  CHECK(read_jpeg_info(bytes.data(), bytes.size(), "gray.jpg").components == 1);
  const Image decoded = decode(bytes);
  REQUIRE(decoded.width == 64);
  REQUIRE(decoded.height == 48);
  Image red = source;  // what was encoded: the R channel, in all three
  for (std::size_t i = 0; i < red.pixels.size(); i += 3) red.pixels[i + 1] = red.pixels[i + 2] = red.pixels[i];
  for (std::size_t i = 0; i < decoded.pixels.size(); i += 3) {
    INFO("byte " << i);
    REQUIRE(decoded.pixels[i] == decoded.pixels[i + 1]);
    REQUIRE(decoded.pixels[i] == decoded.pixels[i + 2]);
  }
  CHECK(psnr(decoded, red) > 35);
}

TEST_CASE("CMYK and YCCK JPEGs decode to the original colours", "[cpu][data]") {
  const Image source = gradient(80, 56);
  for (const bool ycck : {false, true}) {
    INFO((ycck ? "YCCK" : "CMYK"));
    const auto bytes = encode_jpeg_cmyk(source, 95, ycck);
    CHECK(read_jpeg_info(bytes.data(), bytes.size(), "cmyk.jpg").components == 4);
    const Image decoded = decode(bytes);
    CHECK(psnr(decoded, source) > 30);
    CHECK(mean_abs_diff(decoded, source) < 2.5);
  }
  // Without Adobe's marker, the values are ink amounts, not their complements: what was
  // written as white (no ink: stored 255s) reads as full ink, black.
  Image white = Image::blank(16, 16);
  std::fill(white.pixels.begin(), white.pixels.end(), 255);
  const auto marked = encode_jpeg_cmyk(white, 95);
  for (auto v : decode(marked).pixels) REQUIRE(v >= 253);
  for (auto v : decode(without_adobe_marker(marked)).pixels) REQUIRE(v <= 2);
}

TEST_CASE("jpeg_scale_for picks the smallest fast DCT scale that keeps the requested size", "[cpu][data]") {
  CHECK(jpeg_scaled_size(500, 1) == 63);   // ceil(62.5)
  CHECK(jpeg_scaled_size(375, 3) == 141);  // ceil(140.625)
  CHECK(jpeg_scaled_size(375, 8) == 375);
  CHECK(jpeg_scale_for(500, 375, 0, 0) == 1);
  CHECK(jpeg_scale_for(500, 375, 125, 94) == 2);
  CHECK(jpeg_scale_for(500, 375, 126, 94) == 4);   // 3/8 would do, but is no faster than 8/8
  CHECK(jpeg_scale_for(500, 375, 250, 188) == 4);  // 4/8: 250 x 188 exactly
  CHECK(jpeg_scale_for(500, 375, 251, 188) == 8);
  CHECK(jpeg_scale_for(500, 375, 250, 189) == 8);
  CHECK(jpeg_scale_for(500, 375, 1000, 10) == 8);  // larger than the image: full size
  require_error([] { jpeg_scaled_size(100, 9); }, {"scale 9/8"});
}

TEST_CASE("DCT-scaled decodes have libjpeg's sizes and look like a downscaled full decode", "[cpu][data]") {
  const Image source = gradient(203, 150);
  const auto bytes = encode_jpeg(source, 95);
  const Image full = decode(bytes);
  for (int k = 1; k <= 8; ++k) {
    const int w = jpeg_scaled_size(203, k), h = jpeg_scaled_size(150, k);
    const Image scaled = full_decode_at(bytes, k);
    REQUIRE(scaled.width == w);
    REQUIRE(scaled.height == h);
    const Image reference = resized_crop(full, {0, 0, 203, 150}, w, h);
    const double diff = mean_abs_diff(scaled, reference);
    UNSCOPED_INFO("k = " << k << ": mean abs diff " << diff);
    CHECK(diff < (k == 1 ? 3.0 : 1.5));  // 1/8 is each block's mean: a box filter, not a triangle
  }
  // decode_jpeg with a minimum size decodes at jpeg_scale_for's scale.
  CHECK(decode_jpeg(bytes.data(), bytes.size(), "ramp.jpg", 50, 30).pixels == full_decode_at(bytes, 2).pixels);
  CHECK(decode_jpeg(bytes.data(), bytes.size(), "ramp.jpg", 0, 0).pixels == full_decode_at(bytes, 1).pixels);
}

TEST_CASE("decode_jpeg_region equals the same part of a full decode at that scale", "[cpu][data]") {
  const Image source = gradient(211, 157);
  struct Case {
    const char* what;
    std::vector<std::uint8_t> bytes;
  };
  const Case cases[] = {{"4:2:0 baseline", encode_jpeg(source, 90)},
                        {"grayscale", encode_jpeg(source, 90, true)},
                        {"CMYK", encode_jpeg_cmyk(source, 90)},
                        {"YCCK", encode_jpeg_cmyk(source, 90, true)},
                        {"progressive", encode_progressive(source)}};
  struct Box {
    int x0, y0, x1, y1;
  };
  const Box boxes[] = {{0, 0, 1000, 1000}, {37, 21, 150, 99}, {1, 50, 60, 51}, {100, 0, 211, 157}, {-5, 90, 9, 1000}};
  for (const auto& c : cases) {
    for (const int k : {8, 4, 3, 1}) {
      const Image full = full_decode_at(c.bytes, k);
      for (const auto& b : boxes) {
        INFO(c.what << ", k = " << k << ", box " << b.x0 << "," << b.y0 << " - " << b.x1 << "," << b.y1);
        const int left = std::max(b.x0, 0), right = std::min(b.x1, full.width);
        const int top = std::max(b.y0, 0), bottom = std::min(b.y1, full.height);
        if (left >= right || top >= bottom) continue;  // the box misses the small scaled image
        const JpegRegion r =
            decode_jpeg_region(c.bytes.data(), c.bytes.size(), "region.jpg", k, b.x0, b.y0, b.x1, b.y1);
        CHECK(r.scaled_width == full.width);
        CHECK(r.scaled_height == full.height);
        // Exactly the rows asked for; the columns start at or before the box and end at its end.
        CHECK(r.y == top);
        CHECK(r.image.height == bottom - top);
        CHECK(r.x <= left);
        CHECK(r.x + r.image.width == right);
        // Equal to the full decode, but for two columns at a cut that is not the image's edge.
        const int first = r.x == 0 ? 0 : r.x + 2;
        const int last = right == full.width ? right : right - 2;
        int differing = 0;
        for (int y = 0; y < r.image.height; ++y)
          for (int x = first; x < last; ++x)
            for (int ch = 0; ch < 3; ++ch)
              differing += r.image.row(y)[3 * (x - r.x) + ch] != full.row(top + y)[3 * x + ch];
        CHECK(differing == 0);
      }
    }
  }
  require_error(
      [&] { decode_jpeg_region(cases[0].bytes.data(), cases[0].bytes.size(), "off.jpg", 8, 300, 0, 400, 10); },
      {"off.jpg", "does not overlap"});
}

TEST_CASE("bad JPEG data gives errors that name the file", "[cpu][data]") {
  const auto good = encode_jpeg(gradient(320, 240), 90);  // large enough that 30% is past the header
  const auto all_decoders = [](const std::vector<std::uint8_t>& bytes, const std::string& name,
                               const std::vector<std::string>& parts) {
    require_error([&] { decode_jpeg(bytes.data(), bytes.size(), name); }, parts);
    require_error([&] { decode_jpeg(bytes.data(), bytes.size(), name, 30, 20); }, parts);
    require_error([&] { decode_jpeg_region(bytes.data(), bytes.size(), name, 8, 10, 50, 60, 80); }, parts);
  };
  SECTION("empty") {
    const std::vector<std::uint8_t> empty;
    require_error([&] { read_jpeg_info(empty.data(), 0, "/data/empty.jpg"); }, {"'/data/empty.jpg'", "empty"});
    all_decoders(empty, "/data/empty.jpg", {"'/data/empty.jpg'", "empty"});
  }
  SECTION("not a JPEG") {
    const std::vector<std::uint8_t> png = {0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13};
    require_error([&] { read_jpeg_info(png.data(), png.size(), "cat/1.jpg"); },
                  {"'cat/1.jpg'", "not a JPEG file (starts with 89 50 4e 47)"});
    all_decoders(png, "cat/1.jpg", {"not a JPEG file"});
    const std::vector<std::uint8_t> one = {0xff};
    require_error([&] { read_jpeg_info(one.data(), one.size(), "one.jpg"); }, {"one.jpg", "starts with ff)"});
  }
  SECTION("random bytes after the JPEG signature") {
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
      auto bytes = pseudo_random_bytes(2000, seed * 7919);
      bytes[0] = 0xff;
      bytes[1] = 0xd8;
      INFO("seed " << seed);
      require_error([&] { decode(bytes, "noise.jpg"); }, {"'noise.jpg'", "corrupt JPEG"});
    }
  }
  SECTION("truncated") {
    for (const double fraction : {0.3, 0.5, 0.9}) {
      INFO("cut at " << fraction);
      const std::vector<std::uint8_t> cut(good.begin(), good.begin() + std::ptrdiff_t(good.size() * fraction));
      CHECK(read_jpeg_info(cut.data(), cut.size(), "cut.jpg").width == 320);  // the header is intact
      all_decoders(cut, "cut.jpg", {"'cut.jpg'", "corrupt JPEG", "Premature end of JPEG file"});
    }
    const std::vector<std::uint8_t> header_cut(good.begin(), good.begin() + 40);
    require_error([&] { read_jpeg_info(header_cut.data(), header_cut.size(), "head.jpg"); },
                  {"'head.jpg'", "corrupt JPEG"});
  }
  SECTION("zero-sized image") {
    auto bytes = good;
    bool found = false;
    for (std::size_t i = 2; i + 8 < bytes.size() && !found; ++i)
      if (bytes[i] == 0xff && bytes[i + 1] == 0xc0) {  // SOF0: length(2) precision(1) height(2) width(2)
        bytes[i + 5] = bytes[i + 6] = 0;
        found = true;
      }
    REQUIRE(found);
    require_error([&] { read_jpeg_info(bytes.data(), bytes.size(), "flat.jpg"); }, {"'flat.jpg'", "Empty JPEG image"});
  }
  SECTION("damaged entropy-coded data never crashes") {
    // Bytes overwritten all over the file: each decode either succeeds (garbage that still
    // parses) with the right size, or throws dtrain::Error; nothing else.
    int errors = 0;
    for (std::uint64_t seed = 1; seed <= 150; ++seed) {
      auto bytes = good;
      const auto noise = pseudo_random_bytes(8, seed * 104729);
      for (int i = 0; i < 4; ++i) bytes[20 + (noise[2 * i] * 256u + noise[2 * i + 1]) % (bytes.size() - 20)] ^= 0x5a;
      try {
        const JpegRegion r = decode_jpeg_region(bytes.data(), bytes.size(), "damaged.jpg", 4, 5, 5, 50, 40);
        CHECK(r.image.pixels.size() == std::size_t{3} * r.image.width * r.image.height);
      } catch (const Error& e) {
        ++errors;
        CHECK(std::string(e.what()).find("damaged.jpg") != std::string::npos);
      }
    }
    CHECK(errors > 0);
  }
}

TEST_CASE("encode_jpeg rejects what it cannot write", "[cpu][data]") {
  require_error([] { encode_jpeg(Image{}, 90); }, {"encode_jpeg", "0x0"});
  require_error([] { encode_jpeg(Image::blank(4, 4), 0); }, {"quality 0"});
  Image bad = Image::blank(4, 4);
  bad.pixels.resize(10);
  require_error([&] { encode_jpeg_cmyk(bad); }, {"holds 10 bytes"});
}
