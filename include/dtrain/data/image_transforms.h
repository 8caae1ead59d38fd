// The per-sample image transforms of torchvision's ImageNet recipe, on 8-bit RGB images:
// RandomResizedCrop and horizontal flip for training, Resize + CenterCrop for evaluation,
// and normalization to planar f32 as the last step. Crops are boxes in source coordinates,
// chosen from the JPEG header alone, so that load_image can decode just enough of the JPEG:
// at the smallest DCT scale k/8 that keeps the box at least as large as the output, and only
// the rows and columns around the box.
#pragma once

#include "dtrain/data/image.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace dtrain::data {

// A crop rectangle in source pixel coordinates (fractional after scaling).
struct CropBox {
  double x = 0, y = 0, width = 0, height = 0;
};

// The random draws of one sample: a function of (seed, epoch, index) only, so independent of
// the thread, the rank and the order in which samples are loaded. Construction, with f the
// finalizer of splitmix64 (a bijection of 64-bit words) and g = 0x9e3779b97f4a7c15:
// mix(z) = f(z + g), state = mix(mix(mix(seed) ^ epoch) ^ index), so for one (seed, epoch)
// distinct indices give distinct states. Draws are splitmix64 from there: state += g, then
// output f(state).
class SampleRng {
 public:
  SampleRng(std::uint64_t seed, std::int64_t epoch, std::int64_t index);
  std::uint64_t next();
  // Uniform in [lo, hi), from the 53 high bits of one draw.
  double uniform(double lo, double hi);
  // True with probability 1/2 (the top bit of one draw).
  bool coin();

 private:
  std::uint64_t state_;
};

// torchvision.transforms.RandomResizedCrop.get_params, draw for draw: up to 10 attempts of
// area = uniform(scale_min, scale_max) * W * H, r = exp(uniform(log ratio_min, log ratio_max)),
// w = round(sqrt(area * r)), h = round(sqrt(area / r)) (rounding half to even, as Python's
// round), accepted if 0 < w <= W and 0 < h <= H, with offsets y then x drawn uniformly from
// 0..H-h and 0..W-w; otherwise the center crop of the whole image clamped to the ratio range.
// The box has integer coordinates.
CropBox random_resized_crop_box(int width, int height, SampleRng& rng, double scale_min = 0.08, double scale_max = 1.0,
                                double ratio_min = 3.0 / 4, double ratio_max = 4.0 / 3);

// torchvision's Resize(resize) (shorter side to `resize`, longer side int(resize * long / short))
// then CenterCrop(crop) (offsets int(round((side - crop) / 2)), half to even): the box in source
// coordinates that the result shows. Requires resize >= crop (no padding).
CropBox center_crop_box(int width, int height, int resize, int crop);

// `box` in the coordinates of the image scaled from source_width x source_height to
// scaled_width x scaled_height (a DCT-scaled decode).
CropBox scale_box(const CropBox& box, int source_width, int source_height, int scaled_width, int scaled_height);

// The smallest DCT scale k in kJpegScales (1, 2, 4, 8; see jpeg.h) at which `box` of a
// width x height JPEG, decoded at k/8, still spans at least out_width x out_height pixels, so
// the resize only ever shrinks it. 8 when even the full-size box is smaller (the resize then
// enlarges it).
int dct_scale_for(int width, int height, const CropBox& box, int out_width, int out_height);

// The pixels of `box` (which must lie inside the image) resampled to out_width x out_height as
// PIL's resize(size, BILINEAR, box) / torchvision's antialias=True: a triangle filter that
// widens with the scale factor when shrinking, normalized over the pixels inside the image,
// horizontal pass then vertical, each rounded to 8 bits (fixed-point weights of 14 bits, so
// within a level of PIL). Unlike torchvision's crop-then-resize, the outermost output pixels
// also see the source pixels just outside the box (as PIL's resize with a box does).
Image resized_crop(const Image& source, const CropBox& box, int out_width, int out_height);

void horizontal_flip(Image& image);

// (x / 255 - mean[c]) / std[c], in float, into `out` as planar CHW (3 * height * width).
void to_normalized_chw(const Image& image, const float mean[3], const float std[3], float* out);

struct ImageTransformOptions {
  int size = 224;  // output: size x size
  bool train = true;
  double scale_min = 0.08, scale_max = 1.0, ratio_min = 3.0 / 4, ratio_max = 4.0 / 3;
  bool flip = true;              // training: horizontal flip with p = 0.5
  double crop_fraction = 0.875;  // evaluation: resize the shorter side to round(size / crop_fraction), center crop
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
};

// The box load_image crops from a width x height image: RandomResizedCrop's for training (the
// rng's first draws), the Resize + CenterCrop box for evaluation (no draws).
CropBox transform_box(int width, int height, const ImageTransformOptions& options, SampleRng& rng);

// The whole per-sample pipeline: reads the JPEG header, picks transform_box, decodes the box's
// surroundings at scale dct_scale_for(...), resamples the box to size x size, flips (training,
// one coin after the crop's draws, as torchvision's RandomHorizontalFlip follows
// RandomResizedCrop), and writes 3 * size * size normalized floats to `out`.
void load_image(const std::uint8_t* jpeg, std::size_t size, const std::string& name,
                const ImageTransformOptions& options, SampleRng& rng, float* out);

}  // namespace dtrain::data
