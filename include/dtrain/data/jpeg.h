// JPEG decoding and encoding on libjpeg-turbo (its libjpeg API with the turbo extensions).
// Decoding always yields 8-bit RGB (grayscale replicated, CMYK/YCCK converted) and can use
// the DCT scaling of the codec, which decodes at k/8 of the size for a fraction of the cost
// of a full decode followed by a resize. Every failure, including the corrupt or truncated
// data that libjpeg only warns about, is a dtrain::Error naming the file; nothing exits.
#pragma once

#include "dtrain/data/image.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::data {

struct JpegInfo {
  int width = 0;
  int height = 0;
  int components = 0;  // 1 grayscale, 3 YCbCr/RGB, 4 CMYK/YCCK
};

// One side of an image decoded at DCT scale k/8 (k in 1..8), as libjpeg computes it:
// ceil(size * k / 8).
int jpeg_scaled_size(int size, int k);
// The DCT scales that decodes choose from, in increasing order. libjpeg-turbo decodes at any
// k/8, but only these are faster than a full decode: it has SIMD inverse DCTs for 2/8, 4/8 and
// 8/8 (and 1/8 needs only each block's mean), while 3/8 and 5/8-7/8 run plain C transforms
// (a 500x375 photo, quality 90: 3/8 costs as much as 8/8, 5/8-7/8 1.3-2.2x as much).
inline constexpr int kJpegScales[] = {1, 2, 4, 8};
// The smallest k in kJpegScales at which a width x height JPEG decodes to at least
// min_width x min_height pixels (8 when even the full size is smaller). min_width = min_height
// = 0 allows k = 1; passing the full size forces k = 8.
int jpeg_scale_for(int width, int height, int min_width, int min_height);

// Reads only the header. `name` (a file path or tar member) goes into every error message.
JpegInfo read_jpeg_info(const std::uint8_t* data, std::size_t size, const std::string& name);

// Decodes to RGB at the scale jpeg_scale_for(width, height, min_width, min_height) picks; the
// image is jpeg_scaled_size(width, k) x jpeg_scaled_size(height, k).
Image decode_jpeg(const std::uint8_t* data, std::size_t size, const std::string& name, int min_width, int min_height);
// Full-size decode (scale 8/8).
Image decode_jpeg(const std::uint8_t* data, std::size_t size, const std::string& name);

// Part of an image decoded at scale k/8 (any k in 1..8): the rows and columns of the scaled
// image that cover [x0, x1) x [y0, y1) (clamped to it; they must overlap it), possibly with a
// few more columns on the left (libjpeg starts a cropped row on a block boundary). `x`, `y`
// are the part's offset in the scaled image, whose full size is scaled_width x scaled_height.
// Rows below the part are never decoded, rows above it only entropy-decoded, columns beside it
// neither transformed nor colour-converted. The pixels equal a full decode's at the same scale
// but for at most two columns at a left or right edge of the part that is not the image's
// (libjpeg's chroma upsampling treats it as the image's edge), so callers ask for a margin.
// Damage in the undecoded rows still shows: a file that does not end in an end-of-image
// marker is an error like any other truncated JPEG.
struct JpegRegion {
  Image image;
  int x = 0, y = 0;
  int scaled_width = 0, scaled_height = 0;
};
JpegRegion decode_jpeg_region(const std::uint8_t* data, std::size_t size, const std::string& name, int k, int x0,
                              int y0, int x1, int y1);

// Baseline JPEG at `quality` (1-100), 4:2:0 for colour. grayscale = true writes a 1-component
// JPEG from the R channel.
std::vector<std::uint8_t> encode_jpeg(const Image& image, int quality = 90, bool grayscale = false);
// A 4-component JPEG of the image in CMYK as Photoshop writes it: an Adobe marker and
// inverted values, stored as CMYK (Adobe transform 0) or, with ycck, as YCCK (transform 2).
// For tests of the CMYK decode path.
std::vector<std::uint8_t> encode_jpeg_cmyk(const Image& image, int quality = 90, bool ycck = false);

}  // namespace dtrain::data
