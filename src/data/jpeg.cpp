#include "dtrain/data/jpeg.h"

#include "dtrain/core/error.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <cstdlib>
#include <cstring>
#include <string>

#include <jpeglib.h>
// After jpeglib.h: which warning codes exist depends on its configuration.
#include <jerror.h>

namespace dtrain::data {
namespace {

// Far above any training photograph; rejects absurd headers before anything is allocated.
constexpr std::int64_t kMaxPixels = std::int64_t{1} << 28;
// What libjpeg may allocate for one image (progressive files hold all coefficients): past it,
// with no backing store, it reports an error instead of allocating.
constexpr long kMaxCodecMemory = 1L << 30;
// Rows handed to jpeg_read_scanlines at once (it writes straight into them).
constexpr int kRowsPerRead = 8;

// libjpeg's error manager with the jump target of the call in progress. libjpeg calls
// error_exit on a fatal error and must not return into it; throwing through its C frames is
// undefined, so the handler longjmps back to `guarded` below, which reports failure.
struct ErrorManager {
  jpeg_error_mgr base;  // first member: libjpeg hands its address back as cinfo->err
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void exit_with_message(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  cinfo->err->format_message(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings after which the pixels are not what was encoded (libjpeg fills missing data with
// gray and carries on): a truncated or damaged file must not become a training sample. The
// others (garbage bytes between segments, an unknown JFIF revision or Adobe transform, a bad
// ICC marker) leave the image intact, and PIL accepts those files too.
bool loses_data(int code) {
  switch (code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_MUST_RESYNC:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_ARITH_BAD_CODE:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_PROGRESSION:
    case JWRN_TOO_MUCH_DATA:
      return true;
    default:
      return false;
  }
}

void emit_message(j_common_ptr cinfo, int level) {
  if (level < 0 && loses_data(cinfo->err->msg_code)) exit_with_message(cinfo);
  // Harmless warnings and trace messages: silent (the default handler prints to stderr).
}

void install(ErrorManager& err) {
  jpeg_std_error(&err.base);
  err.base.error_exit = exit_with_message;
  err.base.emit_message = emit_message;
  err.message[0] = '\0';
}

// Runs `step` (calls into libjpeg) with err's jump target set; false when libjpeg gave up, with
// its message in err.message. The longjmp skips only libjpeg's frames and `step`'s: steps are
// lambdas over references and plain values that hold no object with a destructor, and write
// only into buffers their caller allocated, so no destructor is skipped.
template <class Step>
bool guarded(ErrorManager& err, const Step& step) {
  if (setjmp(err.jump) != 0) return false;
  step();
  return true;
}

std::string hex_prefix(const std::uint8_t* data, std::size_t size) {
  std::string out;
  for (std::size_t i = 0; i < std::min<std::size_t>(size, 4); ++i)
    out += fmt::format("{}{:02x}", i ? " " : "", data[i]);
  return out;
}

void check_signature(const std::uint8_t* data, std::size_t size, const std::string& name) {
  DTRAIN_CHECK(size > 0, "'{}': empty file, not a JPEG", name);
  DTRAIN_CHECK(size >= 2 && data[0] == 0xff && data[1] == 0xd8, "'{}': not a JPEG file (starts with {})", name,
               hex_prefix(data, size));
}

// libjpeg's state and its error manager, destroyed however the decode ends (also when the
// constructor of the owner throws).
struct DecompressState {
  ErrorManager err{};
  jpeg_decompress_struct cinfo{};  // zeroed: destroying it before jpeg_create_decompress is a no-op
  DecompressState() {
    cinfo.err = &err.base;
    install(err);
  }
  ~DecompressState() { jpeg_destroy_decompress(&cinfo); }
  DecompressState(const DecompressState&) = delete;
  DecompressState& operator=(const DecompressState&) = delete;
};

// A decompressor with its header read.
class Decompressor {
 public:
  Decompressor(const std::uint8_t* data, std::size_t size, const std::string& name) : name_(name) {
    check_signature(data, size, name);
    auto& c = s_.cinfo;
    // libjpeg's calls error out with their own reasons (an empty image, a bad marker, ...).
    run([&] {
      jpeg_create_decompress(&c);
      c.mem->max_memory_to_use = kMaxCodecMemory;
      jpeg_mem_src(&c, data, static_cast<unsigned long>(size));
      jpeg_read_header(&c, TRUE);
    });
    const std::int64_t pixels = std::int64_t{c.image_width} * c.image_height;
    DTRAIN_CHECK(pixels > 0, "'{}': JPEG image of size {}x{}", name, c.image_width, c.image_height);
    DTRAIN_CHECK(pixels <= kMaxPixels, "'{}': JPEG image of {}x{} pixels is larger than the limit of {} pixels", name,
                 c.image_width, c.image_height, kMaxPixels);
  }

  template <class Step>
  void run(const Step& step) {
    if (!guarded(s_.err, step)) DTRAIN_FAIL("'{}': corrupt JPEG: {}", name_, s_.err.message);
  }
  jpeg_decompress_struct& cinfo() { return s_.cinfo; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  DecompressState s_;
};

// PIL's MULDIV255: a * b / 255 rounded to nearest, exactly, for a, b in 0..255.
inline std::uint8_t mul_div_255(unsigned a, unsigned b) {
  const unsigned t = a * b + 128;
  return static_cast<std::uint8_t>(((t >> 8) + t) >> 8);
}

// CMYK (as libjpeg outputs it, after undoing YCCK) to RGB with the multiplicative model PIL
// uses: R = (255 - C)(255 - K) / 255. Adobe's files store 255 - ink, so there the stored
// values are already the complements.
void cmyk_to_rgb(const std::uint8_t* cmyk, std::uint8_t* rgb, int width, bool inverted) {
  const unsigned flip = inverted ? 0 : 255;
  for (int x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    const unsigned k = cmyk[3] ^ flip;
    rgb[0] = mul_div_255(cmyk[0] ^ flip, k);
    rgb[1] = mul_div_255(cmyk[1] ^ flip, k);
    rgb[2] = mul_div_255(cmyk[2] ^ flip, k);
  }
}

// Skips `skip` rows, then reads image.height rows into `image` (via `cmyk_row`, width * 4 bytes,
// when the output is CMYK). Returns the rows read: fewer only if libjpeg stopped delivering.
int read_rows(jpeg_decompress_struct& cinfo, int skip, Image& image, std::uint8_t* cmyk_row, bool inverted) {
  if (skip > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(skip));
  int done = 0;
  while (done < image.height) {
    JSAMPROW rows[kRowsPerRead];
    const int want = cmyk_row ? 1 : std::min(kRowsPerRead, image.height - done);
    for (int i = 0; i < want; ++i) rows[i] = cmyk_row ? cmyk_row : image.row(done + i);
    const auto got = static_cast<int>(jpeg_read_scanlines(&cinfo, rows, static_cast<JDIMENSION>(want)));
    if (got == 0) break;
    if (cmyk_row) cmyk_to_rgb(cmyk_row, image.row(done), image.width, inverted);
    done += got;
  }
  return done;
}

void set_output(Decompressor& d, int k) {
  auto& c = d.cinfo();
  switch (c.jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
      c.out_color_space = JCS_RGB;  // libjpeg-turbo replicates grayscale itself
      break;
    case JCS_CMYK:
    case JCS_YCCK:
      c.out_color_space = JCS_CMYK;  // converted below; libjpeg only undoes YCCK
      break;
    default:
      DTRAIN_FAIL("'{}': unsupported JPEG colour space ({} components, libjpeg colour space {})", d.name(),
                  c.num_components, static_cast<int>(c.jpeg_color_space));
  }
  c.scale_num = static_cast<unsigned>(k);
  c.scale_denom = 8;
}

// Whether `data` holds an end-of-image marker. Inside entropy-coded data every 0xff byte is
// followed by a stuffed 0x00 or is a restart marker, so after the header of a sequential
// JPEG's (single) scan, FF D9 can only be its end. (Multi-scan files are read whole by
// jpeg_start_decompress, which notices truncation itself.)
bool has_end_marker(const std::uint8_t* data, std::size_t size) {
  const std::uint8_t* end = data + size;
  for (const std::uint8_t* p = data; p < end; ++p) {
    p = static_cast<const std::uint8_t*>(std::memchr(p, 0xff, static_cast<std::size_t>(end - p)));
    if (p == nullptr) return false;
    if (p + 1 < end && p[1] == 0xd9) return true;
  }
  return false;
}

void check_scale(int k) { DTRAIN_CHECK(k >= 1 && k <= 8, "JPEG decode: scale {}/8 is not in 1/8..8/8", k); }

}  // namespace

int jpeg_scaled_size(int size, int k) {
  check_scale(k);
  return static_cast<int>((std::int64_t{size} * k + 7) / 8);
}

int jpeg_scale_for(int width, int height, int min_width, int min_height) {
  for (const int k : kJpegScales)
    if (jpeg_scaled_size(width, k) >= min_width && jpeg_scaled_size(height, k) >= min_height) return k;
  return 8;
}

JpegInfo read_jpeg_info(const std::uint8_t* data, std::size_t size, const std::string& name) {
  Decompressor d(data, size, name);
  const auto& c = d.cinfo();
  return {static_cast<int>(c.image_width), static_cast<int>(c.image_height), c.num_components};
}

JpegRegion decode_jpeg_region(const std::uint8_t* data, std::size_t size, const std::string& name, int k, int x0,
                              int y0, int x1, int y1) {
  check_scale(k);
  Decompressor d(data, size, name);
  auto& c = d.cinfo();
  set_output(d, k);
  d.run([&] { jpeg_calc_output_dimensions(&c); });
  JpegRegion region;
  region.scaled_width = static_cast<int>(c.output_width);
  region.scaled_height = static_cast<int>(c.output_height);
  const int left = std::max(x0, 0), right = std::min(x1, region.scaled_width);
  const int top = std::max(y0, 0), bottom = std::min(y1, region.scaled_height);
  DTRAIN_CHECK(left < right && top < bottom,
               "'{}': JPEG region [{}, {}) x [{}, {}) does not overlap the {}x{} image decoded at scale {}/8", name, x0,
               x1, y0, y1, region.scaled_width, region.scaled_height, k);

  // The rows below the region are never decoded, so a truncated file would go unnoticed when
  // the region ends above the cut: check that the data ends as a JPEG does.
  DTRAIN_CHECK(has_end_marker(c.src->next_input_byte, c.src->bytes_in_buffer),
               "'{}': corrupt JPEG: Premature end of JPEG file (no end-of-image marker after the image data)", name);
  d.run([&] { jpeg_start_decompress(&c); });
  auto x = static_cast<JDIMENSION>(left), width = static_cast<JDIMENSION>(right - left);
  if (width < c.output_width) d.run([&] { jpeg_crop_scanline(&c, &x, &width); });  // x moves to a block edge
  region.x = static_cast<int>(x);
  region.y = top;
  region.image = Image::blank(static_cast<int>(c.output_width), bottom - top);

  const bool cmyk = c.out_color_space == JCS_CMYK;
  std::vector<std::uint8_t> cmyk_row(cmyk ? std::size_t{c.output_width} * 4 : 0);
  // Adobe's marker means inverted CMYK (Photoshop's convention), as Chromium's decoder reads it
  // too; PIL assumes inversion even without the marker (such files are rare).
  const bool inverted = c.saw_Adobe_marker;
  int rows = 0;
  d.run([&] { rows = read_rows(c, top, region.image, cmyk ? cmyk_row.data() : nullptr, inverted); });
  DTRAIN_CHECK(rows == region.image.height, "'{}': corrupt JPEG: decoding stopped after {} of {} rows", name, rows,
               region.image.height);
  return region;
}

Image decode_jpeg(const std::uint8_t* data, std::size_t size, const std::string& name, int min_width, int min_height) {
  const JpegInfo info = read_jpeg_info(data, size, name);
  const int k = jpeg_scale_for(info.width, info.height, min_width, min_height);
  return decode_jpeg_region(data, size, name, k, 0, 0, info.width, info.height).image;
}

Image decode_jpeg(const std::uint8_t* data, std::size_t size, const std::string& name) {
  return decode_jpeg(data, size, name, 1 << 30, 1 << 30);
}

namespace {

// A compressor writing to a buffer that libjpeg mallocs; frees both however the encode ends.
struct CompressState {
  ErrorManager err{};
  jpeg_compress_struct cinfo{};
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  CompressState() {
    cinfo.err = &err.base;
    install(err);
  }
  ~CompressState() {
    jpeg_destroy_compress(&cinfo);
    std::free(buffer);
  }
  CompressState(const CompressState&) = delete;
  CompressState& operator=(const CompressState&) = delete;
};

class Compressor {
 public:
  Compressor() {
    run([&] {
      jpeg_create_compress(&s_.cinfo);
      jpeg_mem_dest(&s_.cinfo, &s_.buffer, &s_.size);
    });
  }
  template <class Step>
  void run(const Step& step) {
    if (!guarded(s_.err, step)) DTRAIN_FAIL("encode_jpeg: {}", s_.err.message);
  }
  jpeg_compress_struct& cinfo() { return s_.cinfo; }
  std::vector<std::uint8_t> bytes() const { return {s_.buffer, s_.buffer + s_.size}; }

 private:
  CompressState s_;
};

void check_encodable(const Image& image, int quality) {
  DTRAIN_CHECK(image.width > 0 && image.height > 0, "encode_jpeg: image of size {}x{}", image.width, image.height);
  DTRAIN_CHECK(image.pixels.size() == std::size_t{3} * image.width * image.height,
               "encode_jpeg: {}x{} image holds {} bytes, expected {}", image.width, image.height, image.pixels.size(),
               std::size_t{3} * image.width * image.height);
  DTRAIN_CHECK(quality >= 1 && quality <= 100, "encode_jpeg: quality {} is not in 1..100", quality);
}

// Writes every row, each produced into `buffer` by fill(y, buffer) or, with no fill, taken from
// the image as it is.
template <class Fill>
void write_rows(jpeg_compress_struct& cinfo, const Image& image, std::uint8_t* buffer, const Fill& fill) {
  jpeg_start_compress(&cinfo, TRUE);
  for (int y = 0; y < image.height; ++y) {
    JSAMPROW row = const_cast<std::uint8_t*>(image.row(y));  // libjpeg only reads it
    if (buffer) {
      fill(y, buffer);
      row = buffer;
    }
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
}

}  // namespace

std::vector<std::uint8_t> encode_jpeg(const Image& image, int quality, bool grayscale) {
  check_encodable(image, quality);
  Compressor comp;
  auto& c = comp.cinfo();
  c.image_width = static_cast<JDIMENSION>(image.width);
  c.image_height = static_cast<JDIMENSION>(image.height);
  c.input_components = grayscale ? 1 : 3;
  c.in_color_space = grayscale ? JCS_GRAYSCALE : JCS_RGB;
  std::vector<std::uint8_t> gray(grayscale ? image.width : 0);
  comp.run([&] {
    jpeg_set_defaults(&c);  // YCbCr with 2x2-subsampled chroma (4:2:0) for colour
    jpeg_set_quality(&c, quality, TRUE);
    write_rows(c, image, grayscale ? gray.data() : nullptr, [&](int y, std::uint8_t* out) {
      const std::uint8_t* in = image.row(y);
      for (int x = 0; x < image.width; ++x) out[x] = in[3 * x];
    });
  });
  return comp.bytes();
}

std::vector<std::uint8_t> encode_jpeg_cmyk(const Image& image, int quality, bool ycck) {
  check_encodable(image, quality);
  Compressor comp;
  auto& c = comp.cinfo();
  c.image_width = static_cast<JDIMENSION>(image.width);
  c.image_height = static_cast<JDIMENSION>(image.height);
  c.input_components = 4;
  c.in_color_space = JCS_CMYK;
  std::vector<std::uint8_t> cmyk(std::size_t{4} * image.width);
  comp.run([&] {
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, ycck ? JCS_YCCK : JCS_CMYK);  // both write the Adobe marker
    jpeg_set_quality(&c, quality, TRUE);
    // Inverted (Adobe) CMYK: K' = 255 - K = max(R, G, B) and C' = 255 - C = R / K' * 255, so
    // that the decoder's C' * K' / 255 gives R back.
    write_rows(c, image, cmyk.data(), [&](int y, std::uint8_t* out) {
      const std::uint8_t* in = image.row(y);
      for (int x = 0; x < image.width; ++x, in += 3, out += 4) {
        const unsigned k = std::max({in[0], in[1], in[2]});
        for (int i = 0; i < 3; ++i) out[i] = k == 0 ? 255 : static_cast<std::uint8_t>((in[i] * 255u + k / 2) / k);
        out[3] = static_cast<std::uint8_t>(k);
      }
    });
  });
  return comp.bytes();
}

}  // namespace dtrain::data
