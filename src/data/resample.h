// The resampling kernel behind resized_crop (image_transforms.h): a separable triangle filter
// in 8-bit fixed point, with SIMD loops on x86-64 and portable loops elsewhere.
#pragma once

#include "dtrain/data/image.h"

namespace dtrain::data::detail {

// [x0, x0 + width) x [y0, y0 + height) of `source` (inside it; the caller checks) resampled to
// out_width x out_height: horizontal pass, rounded to 8 bits, then vertical pass.
Image resample(const Image& source, double x0, double y0, double width, double height, int out_width, int out_height);

// The same without the SIMD loops: for tests, which compare the two.
Image resample_portable(const Image& source, double x0, double y0, double width, double height, int out_width,
                        int out_height);

}  // namespace dtrain::data::detail
