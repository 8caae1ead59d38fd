#include "data/idx_files.h"
#include "data/resample.h"
#include "dtrain/core/error.h"
#include "dtrain/data/image_transforms.h"
#include "dtrain/data/jpeg.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <set>
#include <tuple>
#include <vector>

using namespace dtrain;
using namespace dtrain::data;
using dtrain::test::require_error;

namespace {

Image noise_image(int width, int height, std::uint64_t seed) {
  Image im = Image::blank(width, height);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& p : im.pixels) {  // xorshift64
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p = static_cast<std::uint8_t>(x >> 32);
  }
  return im;
}

// Smooth and colourful: what JPEG encodes well.
Image photo_like(int width, int height) {
  Image im = Image::blank(width, height);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      std::uint8_t* p = im.row(y) + 3 * x;
      p[0] = static_cast<std::uint8_t>(128 + 100 * std::sin(x * 0.05));
      p[1] = static_cast<std::uint8_t>(128 + 100 * std::cos(y * 0.07));
      p[2] = static_cast<std::uint8_t>((x + 2 * y) % 256);
    }
  return im;
}

// Python's round(): half to even, written out.
int python_round(double v) {
  const double f = std::floor(v), frac = v - f;
  if (frac != 0.5) return static_cast<int>(frac < 0.5 ? f : f + 1);
  return static_cast<int>(std::fmod(f, 2) == 0 ? f : f + 1);
}

// torchvision.transforms.RandomResizedCrop.get_params as written in Python, with SampleRng in
// place of torch's generator (torch.randint(0, n) = floor(uniform(0, n))). Returns (x, y, w, h).
std::tuple<int, int, int, int> torchvision_get_params(int width, int height, SampleRng& rng,
                                                      std::pair<double, double> scale,
                                                      std::pair<double, double> ratio) {
  const double area = double(height) * width;
  const double log_ratio[2] = {std::log(ratio.first), std::log(ratio.second)};
  for (int i = 0; i < 10; ++i) {
    const double target_area = area * rng.uniform(scale.first, scale.second);
    const double aspect_ratio = std::exp(rng.uniform(log_ratio[0], log_ratio[1]));
    const int w = python_round(std::sqrt(target_area * aspect_ratio));
    const int h = python_round(std::sqrt(target_area / aspect_ratio));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int top = static_cast<int>(std::floor(rng.uniform(0, height - h + 1)));
      const int left = static_cast<int>(std::floor(rng.uniform(0, width - w + 1)));
      return {left, top, w, h};
    }
  }
  const double in_ratio = double(width) / double(height);
  int w, h;
  if (in_ratio < std::min(ratio.first, ratio.second)) {
    w = width;
    h = python_round(w / std::min(ratio.first, ratio.second));
  } else if (in_ratio > std::max(ratio.first, ratio.second)) {
    h = height;
    w = python_round(h * std::max(ratio.first, ratio.second));
  } else {
    w = width;
    h = height;
  }
  return {(width - w) / 2, (height - h) / 2, w, h};
}

// PIL's bilinear resize with a box, in double: every input pixel weighted by the triangle
// (widened by the scale factor when shrinking) at its distance from the output pixel's centre,
// normalized; horizontal pass, rounded to 8 bits, then vertical.
double triangle_filter(const std::vector<double>& line, double lo, double hi, int out_size, int i) {
  const double scale = (hi - lo) / out_size, widen = std::max(scale, 1.0);
  const double center = lo + (i + 0.5) * scale;
  double sum = 0, weights = 0;
  for (std::size_t j = 0; j < line.size(); ++j) {
    const double w = std::max(0.0, 1 - std::abs((j + 0.5 - center) / widen));
    sum += w * line[j];
    weights += w;
  }
  return sum / weights;
}

std::uint8_t to_byte(double v) { return static_cast<std::uint8_t>(std::clamp(std::floor(v + 0.5), 0.0, 255.0)); }

Image reference_resized_crop(const Image& src, const CropBox& box, int out_w, int out_h) {
  Image mid = Image::blank(out_w, src.height);
  std::vector<double> line;
  for (int y = 0; y < src.height; ++y)
    for (int c = 0; c < 3; ++c) {
      line.clear();
      for (int x = 0; x < src.width; ++x) line.push_back(src.row(y)[3 * x + c]);
      for (int x = 0; x < out_w; ++x)
        mid.row(y)[3 * x + c] = to_byte(triangle_filter(line, box.x, box.x + box.width, out_w, x));
    }
  Image out = Image::blank(out_w, out_h);
  for (int x = 0; x < out_w; ++x)
    for (int c = 0; c < 3; ++c) {
      line.clear();
      for (int y = 0; y < src.height; ++y) line.push_back(mid.row(y)[3 * x + c]);
      for (int y = 0; y < out_h; ++y)
        out.row(y)[3 * x + c] = to_byte(triangle_filter(line, box.y, box.y + box.height, out_h, y));
    }
  return out;
}

int max_abs_diff(const Image& a, const Image& b) {
  REQUIRE(a.width == b.width);
  REQUIRE(a.height == b.height);
  int m = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) m = std::max(m, std::abs(int(a.pixels[i]) - int(b.pixels[i])));
  return m;
}

constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};

}  // namespace

TEST_CASE("SampleRng draws depend only on seed, epoch and index", "[cpu][data]") {
  const auto draws = [](std::uint64_t seed, std::int64_t epoch, std::int64_t index) {
    SampleRng rng(seed, epoch, index);
    std::vector<std::uint64_t> out;
    for (int i = 0; i < 4; ++i) out.push_back(rng.next());
    return out;
  };
  CHECK(draws(7, 2, 1000) == draws(7, 2, 1000));
  CHECK(draws(7, 2, 1000) != draws(7, 2, 1001));
  CHECK(draws(7, 2, 1000) != draws(7, 3, 1000));
  CHECK(draws(7, 2, 1000) != draws(8, 2, 1000));
  CHECK(draws(0, 0, 0) != draws(0, 0, 1));
  // Uniform and fair enough for augmentation: the first draws of 20000 samples.
  double sum = 0;
  int heads = 0;
  for (int i = 0; i < 20000; ++i) {
    SampleRng rng(1, 0, i);
    const double u = rng.uniform(2.0, 3.0);
    REQUIRE(u >= 2.0);
    REQUIRE(u < 3.0);
    sum += u;
    heads += rng.coin();
  }
  CHECK(sum / 20000 == Approx(2.5).margin(0.01));
  CHECK(heads > 9700);
  CHECK(heads < 10300);
}

TEST_CASE("random_resized_crop_box follows torchvision's get_params", "[cpu][data]") {
  struct Case {
    int width, height;
    std::pair<double, double> scale, ratio;
  };
  const Case cases[] = {{500, 375, {0.08, 1.0}, {3.0 / 4, 4.0 / 3}},
                        {375, 500, {0.08, 1.0}, {3.0 / 4, 4.0 / 3}},
                        {64, 64, {0.5, 0.9}, {0.5, 2.0}},
                        {1000, 50, {0.08, 1.0}, {3.0 / 4, 4.0 / 3}},  // too flat for any attempt: fallback
                        {3, 2, {0.08, 1.0}, {3.0 / 4, 4.0 / 3}}};
  for (const auto& c : cases) {
    std::set<std::tuple<int, int, int, int>> distinct;
    for (std::uint64_t seed : {1, 42}) {
      for (int index = 0; index < 200; ++index) {
        INFO(c.width << "x" << c.height << " seed " << seed << " index " << index);
        SampleRng rng(seed, 3, index), reference_rng(seed, 3, index);
        const CropBox box = random_resized_crop_box(c.width, c.height, rng, c.scale.first, c.scale.second,
                                                    c.ratio.first, c.ratio.second);
        const auto [x, y, w, h] = torchvision_get_params(c.width, c.height, reference_rng, c.scale, c.ratio);
        REQUIRE(box.x == x);
        REQUIRE(box.y == y);
        REQUIRE(box.width == w);
        REQUIRE(box.height == h);
        CHECK(rng.next() == reference_rng.next());  // the same number of draws
        // Inside the image.
        CHECK((x >= 0 && y >= 0 && x + w <= c.width && y + h <= c.height && w > 0 && h > 0));
        distinct.insert({x, y, w, h});
        SampleRng again(seed, 3, index);
        const CropBox repeat = random_resized_crop_box(c.width, c.height, again, c.scale.first, c.scale.second,
                                                       c.ratio.first, c.ratio.second);
        CHECK((repeat.x == box.x && repeat.y == box.y && repeat.width == box.width && repeat.height == box.height));
      }
    }
    if (c.width == 500) {
      // In range up to the rounding of w and h to whole pixels.
      for (const auto& [x, y, w, h] : distinct) {
        const double area = double(w) * h / (500.0 * 375.0), ratio = double(w) / h;
        CHECK(area >= 0.08 * 0.9);
        CHECK(area <= 1.0);
        CHECK(ratio >= 0.75 * 0.98);
        CHECK(ratio <= 4.0 / 3 * 1.02);
      }
      CHECK(distinct.size() > 390);  // different indices, different boxes
    }
  }
  // The fallback, by hand: 1000x50 is wider than 4:3 allows, so the box is the full height
  // and round(50 * 4/3) = 67 wide, centred: x = (1000 - 67) // 2.
  SampleRng rng(5, 0, 0);
  const CropBox flat = random_resized_crop_box(1000, 50, rng);
  CHECK(flat.x == 466);
  CHECK(flat.y == 0);
  CHECK(flat.width == 67);
  CHECK(flat.height == 50);
  require_error([&] { random_resized_crop_box(10, 10, rng, 0.5, 0.2); }, {"scale range"});
  require_error([&] { random_resized_crop_box(0, 10, rng); }, {"0x10"});
}

TEST_CASE("center_crop_box is torchvision's Resize then CenterCrop", "[cpu][data]") {
  // 500x375, Resize(256): 341x256 (int(256 * 500 / 375) = 341); CenterCrop(224): top
  // round(32 / 2) = 16, left round(117 / 2) = round(58.5) = 58 (half to even).
  const CropBox landscape = center_crop_box(500, 375, 256, 224);
  CHECK(landscape.x == Approx(58 * 500.0 / 341));
  CHECK(landscape.y == Approx(16 * 375.0 / 256));
  CHECK(landscape.width == Approx(224 * 500.0 / 341));
  CHECK(landscape.height == Approx(224 * 375.0 / 256));
  const CropBox portrait = center_crop_box(375, 500, 256, 224);
  CHECK(portrait.x == Approx(16 * 375.0 / 256));
  CHECK(portrait.y == Approx(58 * 500.0 / 341));
  // Already at the resize size: a plain center crop.
  const CropBox square = center_crop_box(256, 256, 256, 224);
  CHECK(square.x == 16);
  CHECK(square.y == 16);
  CHECK(square.width == 224);
  CHECK(square.height == 224);
  // 61 - 32 = 29 pixels to spare: round(14.5) = 14.
  const CropBox odd = center_crop_box(61, 40, 40, 32);
  CHECK(odd.x == Approx(14.0));
  CHECK(odd.y == Approx(4.0));
  require_error([] { center_crop_box(100, 100, 200, 224); }, {"resize 200 then crop 224"});
}

TEST_CASE("scale_box and dct_scale_for", "[cpu][data]") {
  const CropBox scaled = scale_box({10, 20, 100, 80}, 500, 400, 250, 100);
  CHECK(scaled.x == 5);
  CHECK(scaled.y == 5);
  CHECK(scaled.width == 50);
  CHECK(scaled.height == 20);
  // A 0.3-area box of a 500x375 photo for a 64 pixel output: a small DCT scale suffices,
  // the smallest that keeps the box at least 64 pixels on each side.
  const double side = std::sqrt(0.3 * 500 * 375);
  const CropBox big{100, 50, side, side};
  const int k = dct_scale_for(500, 375, big, 64, 64);
  CHECK(k < 8);
  const auto box_at = [&](int s) {
    return scale_box(big, 500, 375, jpeg_scaled_size(500, s), jpeg_scaled_size(375, s));
  };
  CHECK(box_at(k).width >= 64);
  CHECK(box_at(k).height >= 64);
  const int* kk = std::find(std::begin(kJpegScales), std::end(kJpegScales), k);
  REQUIRE(kk != std::begin(kJpegScales));
  CHECK(box_at(kk[-1]).width < 64);  // the next smaller scale would not do
  // A box smaller than the output needs the full size (the resize then enlarges).
  CHECK(dct_scale_for(500, 375, {200, 100, 40, 40}, 64, 64) == 8);
  CHECK(dct_scale_for(500, 375, {0, 0, 500, 375}, 500, 375) == 8);
  CHECK(dct_scale_for(500, 375, {0, 0, 500, 375}, 62, 46) == 1);
}

TEST_CASE("resized_crop copies exactly when the size is kept", "[cpu][data]") {
  const Image src = noise_image(37, 23, 1);
  CHECK(resized_crop(src, {0, 0, 37, 23}, 37, 23).pixels == src.pixels);
  const Image part = resized_crop(src, {5, 7, 20, 9}, 20, 9);
  REQUIRE(part.width == 20);
  REQUIRE(part.height == 9);
  for (int y = 0; y < 9; ++y)
    for (int x = 0; x < 20; ++x)
      for (int c = 0; c < 3; ++c) REQUIRE(part.row(y)[3 * x + c] == src.row(y + 7)[3 * (x + 5) + c]);
}

TEST_CASE("resized_crop keeps a constant image constant", "[cpu][data]") {
  Image flat = Image::blank(64, 48);
  for (std::size_t i = 0; i < flat.pixels.size(); ++i) flat.pixels[i] = i % 3 == 0 ? 200 : i % 3 == 1 ? 17 : 255;
  for (const auto& [box, w, h] :
       {std::tuple{CropBox{0, 0, 64, 48}, 32, 24}, std::tuple{CropBox{3.3, 1.7, 50.2, 40.1}, 13, 11},
        std::tuple{CropBox{10, 10, 20, 15}, 47, 33}}) {
    const Image out = resized_crop(flat, box, w, h);
    for (std::size_t i = 0; i < out.pixels.size(); ++i) REQUIRE(out.pixels[i] == flat.pixels[i % 3]);
  }
}

TEST_CASE("resized_crop matches a float reference of the triangle filter", "[cpu][data]") {
  const Image src = noise_image(83, 61, 2);
  const std::tuple<CropBox, int, int> cases[] = {{{0, 0, 83, 61}, 41, 30},           // about 2x down
                                                 {{3.25, 7.5, 70.4, 50.1}, 19, 13},  // 3.7x down from a fractional box
                                                 {{10, 5, 30, 20}, 45, 31},          // up
                                                 {{0, 0, 83, 61}, 83, 20},           // one axis only
                                                 {{40.5, 0.5, 42.5, 60.5}, 7, 60}};  // box touching the image edges
  for (const auto& [box, w, h] : cases) {
    INFO("box " << box.x << "," << box.y << " " << box.width << "x" << box.height << " to " << w << "x" << h);
    CHECK(max_abs_diff(resized_crop(src, box, w, h), reference_resized_crop(src, box, w, h)) <= 1);
  }
  require_error([&] { resized_crop(src, {80, 0, 10, 10}, 5, 5); }, {"not inside the 83x61 image"});
  require_error([&] { resized_crop(src, {0, 0, 10, 10}, 0, 5); }, {"output size 0x5"});
}

TEST_CASE("resized_crop's SIMD loops compute what the portable ones do", "[cpu][data]") {
  // Widths and tap counts that exercise whole and partial 16-byte chunks, odd and even tap
  // counts, and the rows at the buffer's end that the SIMD loads must not run past.
  const Image src = noise_image(131, 57, 5);
  const std::tuple<CropBox, int, int> cases[] = {{{0, 0, 131, 57}, 64, 28},    {{0.5, 3.25, 130.5, 53.75}, 23, 9},
                                                 {{7, 11, 5, 4}, 41, 37},      {{0, 0, 131, 57}, 131, 57},
                                                 {{100, 40, 31, 17}, 3, 2},    {{0, 0, 131, 57}, 1, 1},
                                                 {{120.2, 0, 10.8, 57}, 5, 29}};
  for (const auto& [box, w, h] : cases) {
    INFO("box " << box.x << "," << box.y << " " << box.width << "x" << box.height << " to " << w << "x" << h);
    const Image simd = data::detail::resample(src, box.x, box.y, box.width, box.height, w, h);
    const Image portable = data::detail::resample_portable(src, box.x, box.y, box.width, box.height, w, h);
    CHECK(simd.pixels == portable.pixels);
  }
  const Image column = noise_image(1, 40, 6);  // rows of 3 bytes: every load would run past
  CHECK(data::detail::resample(column, 0, 0, 1, 40, 1, 13).pixels ==
        data::detail::resample_portable(column, 0, 0, 1, 40, 1, 13).pixels);
}

TEST_CASE("horizontal_flip mirrors each row", "[cpu][data]") {
  for (const int width : {1, 6, 7}) {
    const Image src = noise_image(width, 5, 3);
    Image flipped = src;
    horizontal_flip(flipped);
    for (int y = 0; y < 5; ++y)
      for (int x = 0; x < width; ++x)
        for (int c = 0; c < 3; ++c) REQUIRE(flipped.row(y)[3 * x + c] == src.row(y)[3 * (width - 1 - x) + c]);
  }
}

TEST_CASE("to_normalized_chw writes (x / 255 - mean) / std planes", "[cpu][data]") {
  Image src = noise_image(16, 16, 4);
  for (int v = 0; v < 256; ++v) src.pixels[v] = static_cast<std::uint8_t>(v);  // every value appears
  std::vector<float> out(3 * 16 * 16, -1e30f);
  to_normalized_chw(src, kMean, kStd, out.data());
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c) {
        const float expected = (static_cast<float>(src.row(y)[3 * x + c]) / 255.0f - kMean[c]) / kStd[c];
        REQUIRE(out[(c * 16 + y) * 16 + x] == expected);
      }
}

TEST_CASE("load_image is decode, box, resample, flip and normalize", "[cpu][data]") {
  const Image photo = photo_like(500, 375);
  const std::vector<std::vector<std::uint8_t>> files = {encode_jpeg(photo, 90), encode_jpeg(photo, 90, true),
                                                        encode_jpeg_cmyk(photo, 90)};
  ImageTransformOptions train;
  train.size = 64;
  ImageTransformOptions eval = train;
  eval.train = false;
  const std::size_t n = 3 * 64 * 64;
  for (const auto& file : files) {
    for (const auto& options : {train, eval}) {
      for (std::int64_t index = 0; index < 12; ++index) {
        INFO((options.train ? "train" : "eval") << " index " << index);
        std::vector<float> out(n);
        SampleRng rng(9, 1, index);
        load_image(file.data(), file.size(), "photo.jpg", options, rng, out.data());
        // The same steps one by one, on a full decode at the same DCT scale.
        SampleRng ref_rng(9, 1, index);
        const CropBox box = transform_box(500, 375, options, ref_rng);
        const int k = dct_scale_for(500, 375, box, 64, 64);
        const int sw = jpeg_scaled_size(500, k), sh = jpeg_scaled_size(375, k);
        const Image decoded = decode_jpeg(file.data(), file.size(), "photo.jpg", sw, sh);
        REQUIRE(decoded.width == sw);
        Image expected = resized_crop(decoded, scale_box(box, 500, 375, sw, sh), 64, 64);
        if (options.train && ref_rng.coin()) horizontal_flip(expected);
        std::vector<float> reference(n);
        to_normalized_chw(expected, options.mean, options.std, reference.data());
        REQUIRE(out == reference);
        for (float v : out) REQUIRE(std::isfinite(v));
      }
    }
  }
  // Evaluation draws nothing; training is a function of the sample's stream.
  const auto& file = files[0];
  const auto run = [&](const ImageTransformOptions& options, std::int64_t index) {
    std::vector<float> out(n);
    SampleRng rng(3, 0, index);
    load_image(file.data(), file.size(), "photo.jpg", options, rng, out.data());
    return out;
  };
  CHECK(run(eval, 0) == run(eval, 1));
  CHECK(run(train, 5) == run(train, 5));
  CHECK(run(train, 5) != run(train, 6));
  // Evaluation of 500x375 at 64: Resize(73), CenterCrop(64): the DCT scale is 2/8 (125x94,
  // whose center box, 64 * 94/73 = 82 pixels, still covers 64).
  SampleRng unused(0, 0, 0);
  const CropBox eval_box = transform_box(500, 375, eval, unused);
  CHECK(eval_box.height == Approx(64 * 375.0 / 73));
  CHECK(dct_scale_for(500, 375, eval_box, 64, 64) == 2);

  const std::vector<std::uint8_t> cut(file.begin(), file.begin() + std::ptrdiff_t(file.size() / 2));
  std::vector<float> out(n);
  SampleRng rng(1, 0, 0);
  require_error([&] { load_image(cut.data(), cut.size(), "train/cat/7.jpg", eval, rng, out.data()); },
                {"'train/cat/7.jpg'", "Premature end of JPEG file"});
}
