#include "dtrain/data/image_transforms.h"

#include "data/resample.h"
#include "dtrain/core/error.h"
#include "dtrain/data/jpeg.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dtrain::data {
namespace {

constexpr std::uint64_t kGamma = 0x9e3779b97f4a7c15ull;  // splitmix64's increment

std::uint64_t finalize(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
std::uint64_t mix(std::uint64_t z) { return finalize(z + kGamma); }

// torch.randint(0, n): uniform over 0..n-1.
int uniform_int(SampleRng& rng, int n) { return std::min(n - 1, static_cast<int>(rng.uniform(0, n))); }

// Python's round() (half to even), which torchvision's box arithmetic uses; nearbyint rounds
// half to even in the default rounding mode.
int round_half_even(double v) { return static_cast<int>(std::nearbyint(v)); }

void check_image(const Image& image, const char* op) {
  DTRAIN_CHECK(image.width > 0 && image.height > 0, "{}: image of size {}x{}", op, image.width, image.height);
  DTRAIN_CHECK(image.pixels.size() == std::size_t{3} * image.width * image.height,
               "{}: {}x{} image holds {} bytes, expected {}", op, image.width, image.height, image.pixels.size(),
               std::size_t{3} * image.width * image.height);
}

}  // namespace

SampleRng::SampleRng(std::uint64_t seed, std::int64_t epoch, std::int64_t index)
    : state_(mix(mix(mix(seed) ^ static_cast<std::uint64_t>(epoch)) ^ static_cast<std::uint64_t>(index))) {}

std::uint64_t SampleRng::next() {
  state_ += kGamma;
  return finalize(state_);
}

double SampleRng::uniform(double lo, double hi) {
  const double v = lo + (hi - lo) * (static_cast<double>(next() >> 11) * 0x1.0p-53);
  return v < hi ? v : std::nextafter(hi, lo);  // the sum can round up to hi
}

bool SampleRng::coin() { return (next() >> 63) != 0; }

CropBox random_resized_crop_box(int width, int height, SampleRng& rng, double scale_min, double scale_max,
                                double ratio_min, double ratio_max) {
  DTRAIN_CHECK(width > 0 && height > 0, "random_resized_crop_box: image of size {}x{}", width, height);
  DTRAIN_CHECK(scale_min > 0 && scale_min <= scale_max, "random_resized_crop_box: scale range ({}, {})", scale_min,
               scale_max);
  DTRAIN_CHECK(ratio_min > 0 && ratio_min <= ratio_max, "random_resized_crop_box: ratio range ({}, {})", ratio_min,
               ratio_max);
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(ratio_min), log_hi = std::log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform(scale_min, scale_max);
    const double ratio = std::exp(rng.uniform(log_lo, log_hi));
    const int w = round_half_even(std::sqrt(target * ratio));
    const int h = round_half_even(std::sqrt(target / ratio));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int y = uniform_int(rng, height - h + 1);
      const int x = uniform_int(rng, width - w + 1);
      return {double(x), double(y), double(w), double(h)};
    }
  }
  // The whole image, narrowed to the nearest allowed aspect ratio.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < ratio_min)
    h = round_half_even(w / ratio_min);
  else if (in_ratio > ratio_max)
    w = round_half_even(h * ratio_max);
  return {double((width - w) / 2), double((height - h) / 2), double(w), double(h)};
}

CropBox center_crop_box(int width, int height, int resize, int crop) {
  DTRAIN_CHECK(width > 0 && height > 0, "center_crop_box: image of size {}x{}", width, height);
  DTRAIN_CHECK(crop > 0 && resize >= crop, "center_crop_box: resize {} then crop {} (needs resize >= crop > 0)", resize,
               crop);
  const int shorter = std::min(width, height), longer = std::max(width, height);
  const int resized_long = static_cast<int>(static_cast<double>(resize) * longer / shorter);
  const int resized_w = width <= height ? resize : resized_long;
  const int resized_h = width <= height ? resized_long : resize;
  const int left = round_half_even((resized_w - crop) / 2.0);
  const int top = round_half_even((resized_h - crop) / 2.0);
  const double sx = static_cast<double>(width) / resized_w, sy = static_cast<double>(height) / resized_h;
  return {left * sx, top * sy, crop * sx, crop * sy};
}

CropBox scale_box(const CropBox& box, int source_width, int source_height, int scaled_width, int scaled_height) {
  DTRAIN_CHECK(source_width > 0 && source_height > 0 && scaled_width > 0 && scaled_height > 0,
               "scale_box: from {}x{} to {}x{}", source_width, source_height, scaled_width, scaled_height);
  const double sx = static_cast<double>(scaled_width) / source_width;
  const double sy = static_cast<double>(scaled_height) / source_height;
  return {box.x * sx, box.y * sy, box.width * sx, box.height * sy};
}

int dct_scale_for(int width, int height, const CropBox& box, int out_width, int out_height) {
  for (const int k : kJpegScales) {
    const CropBox scaled = scale_box(box, width, height, jpeg_scaled_size(width, k), jpeg_scaled_size(height, k));
    if (scaled.width >= out_width && scaled.height >= out_height) return k;
  }
  return 8;
}

Image resized_crop(const Image& source, const CropBox& box, int out_width, int out_height) {
  check_image(source, "resized_crop");
  DTRAIN_CHECK(out_width > 0 && out_height > 0, "resized_crop: output size {}x{}", out_width, out_height);
  // A hair of tolerance for boxes that went through scale_box's floating point.
  constexpr double kSlack = 1e-6;
  DTRAIN_CHECK(box.width > 0 && box.height > 0 && box.x >= -kSlack && box.y >= -kSlack &&
                   box.x + box.width <= source.width + kSlack && box.y + box.height <= source.height + kSlack,
               "resized_crop: box (x {}, y {}, {}x{}) is not inside the {}x{} image", box.x, box.y, box.width,
               box.height, source.width, source.height);
  return detail::resample(source, box.x, box.y, box.width, box.height, out_width, out_height);
}

void horizontal_flip(Image& image) {
  for (int y = 0; y < image.height; ++y) {
    std::uint8_t* left = image.row(y);
    std::uint8_t* right = left + 3 * (image.width - 1);
    for (; left < right; left += 3, right -= 3) std::swap_ranges(left, left + 3, right);
  }
}

void to_normalized_chw(const Image& image, const float mean[3], const float std[3], float* out) {
  check_image(image, "to_normalized_chw");
  // The formula once per channel and byte value: the same floats, without a division per pixel.
  float table[3][256];
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) table[c][v] = (static_cast<float>(v) / 255.0f - mean[c]) / std[c];
  const std::size_t plane = static_cast<std::size_t>(image.width) * image.height;
  const std::uint8_t* p = image.pixels.data();
  float* r = out;
  float* g = out + plane;
  float* b = out + 2 * plane;
  for (std::size_t i = 0; i < plane; ++i, p += 3) {
    r[i] = table[0][p[0]];
    g[i] = table[1][p[1]];
    b[i] = table[2][p[2]];
  }
}

CropBox transform_box(int width, int height, const ImageTransformOptions& options, SampleRng& rng) {
  if (options.train)
    return random_resized_crop_box(width, height, rng, options.scale_min, options.scale_max, options.ratio_min,
                                   options.ratio_max);
  DTRAIN_CHECK(options.crop_fraction > 0 && options.crop_fraction <= 1,
               "image transform: crop_fraction {} is not in (0, 1]", options.crop_fraction);
  const int resize = static_cast<int>(std::lround(options.size / options.crop_fraction));
  return center_crop_box(width, height, resize, options.size);
}

void load_image(const std::uint8_t* jpeg, std::size_t size, const std::string& name,
                const ImageTransformOptions& options, SampleRng& rng, float* out) {
  const int n = options.size;
  DTRAIN_CHECK(n > 0, "load_image: output size {}", n);
  const JpegInfo info = read_jpeg_info(jpeg, size, name);
  const CropBox box = transform_box(info.width, info.height, options, rng);
  const int k = dct_scale_for(info.width, info.height, box, n, n);
  CropBox scaled =
      scale_box(box, info.width, info.height, jpeg_scaled_size(info.width, k), jpeg_scaled_size(info.height, k));
  // Decode the box plus what the resampling reads around it (the filter's support, a pixel
  // for rounding) and, left and right, the columns that libjpeg's upsampling may get wrong
  // at a cropped edge, so the result equals that of a full decode at this scale.
  const int margin_x = static_cast<int>(std::ceil(std::max(scaled.width / n, 1.0))) + 3;
  const int margin_y = static_cast<int>(std::ceil(std::max(scaled.height / n, 1.0))) + 1;
  const JpegRegion region = decode_jpeg_region(jpeg, size, name, k, static_cast<int>(std::floor(scaled.x)) - margin_x,
                                               static_cast<int>(std::floor(scaled.y)) - margin_y,
                                               static_cast<int>(std::ceil(scaled.x + scaled.width)) + margin_x,
                                               static_cast<int>(std::ceil(scaled.y + scaled.height)) + margin_y);
  scaled.x -= region.x;
  scaled.y -= region.y;
  Image image = resized_crop(region.image, scaled, n, n);
  if (options.train && options.flip && rng.coin()) horizontal_flip(image);
  to_normalized_chw(image, options.mean, options.std, out);
}

}  // namespace dtrain::data
