#include "data/resample.h"

#include "dtrain/core/error.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DTRAIN_RESAMPLE_X86 1
#else
#define DTRAIN_RESAMPLE_X86 0
#endif

namespace dtrain::data::detail {
namespace {

// Fixed-point weights: 14 bits, so that a weight fits an int16 lane and a pixel times a weight
// is one pmaddwd; sums stay far inside int32. Rounding the weights moves a result by at most
// taps * 255 / 2^15, a few hundredths of a level.
constexpr int kWeightBits = 14;
constexpr std::int32_t kHalf = std::int32_t{1} << (kWeightBits - 1);

// One resampling pass: output pixel i reads `taps` input pixels from first[i] with
// weights[i * taps ...]. Every output pixel reads the same number (windows are padded with zero
// weights), so loops run a count the branch predictor learns.
struct Taps {
  std::vector<int> first;
  std::vector<std::int16_t> weights;
  int taps = 0;
};

double triangle(double x) {
  x = std::abs(x);
  return x < 1 ? 1 - x : 0;
}

// PIL's precompute_coeffs for the bilinear filter: output pixel i centred at
// lo + (i + 0.5) * scale in input coordinates, the triangle widened by scale when shrinking
// (antialiasing), clipped to the input and normalized over what is left, then rounded to fixed
// point. Leading and trailing taps whose weight rounds to 0 are dropped.
Taps compute_taps(int in_size, double lo, double hi, int out_size) {
  const double scale = (hi - lo) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;  // the triangle's support is 1
  const int max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  std::vector<std::int16_t> fixed(static_cast<std::size_t>(out_size) * max_taps, 0);
  std::vector<int> begin(out_size);
  std::vector<double> k(max_taps);
  Taps t;
  for (int i = 0; i < out_size; ++i) {
    const double center = lo + (i + 0.5) * scale;
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int n = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double sum = 0;
    for (int x = 0; x < n; ++x) sum += k[x] = triangle((x + xmin - center + 0.5) / filter_scale);
    DTRAIN_CHECK(sum > 0, "resized_crop: output pixel {} (centre {}) has no input pixel among {}", i, center, in_size);
    std::int16_t* w = &fixed[static_cast<std::size_t>(i) * max_taps];
    int b = -1, e = 0;
    for (int x = 0; x < n; ++x) {
      w[x] = static_cast<std::int16_t>(k[x] / sum * (1 << kWeightBits) + 0.5);
      if (w[x] != 0) {
        if (b < 0) b = x;
        e = x + 1;
      }
    }
    begin[i] = xmin + b;
    if (b > 0) {  // move the taps to the front
      std::copy(w + b, w + e, w);
      std::fill(w + (e - b), w + max_taps, std::int16_t{0});
    }
    t.taps = std::max(t.taps, e - b);
  }
  // One window size for all; a window that would run past the input's end starts earlier.
  t.first.resize(out_size);
  t.weights.assign(static_cast<std::size_t>(out_size) * t.taps, 0);
  for (int i = 0; i < out_size; ++i) {
    t.first[i] = std::min(begin[i], in_size - t.taps);
    const int shift = begin[i] - t.first[i];
    const std::int16_t* w = &fixed[static_cast<std::size_t>(i) * max_taps];
    std::copy(w, w + t.taps - shift, &t.weights[static_cast<std::size_t>(i) * t.taps + shift]);
  }
  return t;
}

inline std::uint8_t clip8(std::int32_t acc) {
  return static_cast<std::uint8_t>(std::clamp(acc >> kWeightBits, 0, 255));
}

void horizontal_row_portable(const std::uint8_t* in, const Taps& t, std::uint8_t* out, int out_width) {
  const std::int16_t* w = t.weights.data();
  for (int x = 0; x < out_width; ++x, out += 3, w += t.taps) {
    const std::uint8_t* p = in + 3 * t.first[x];
    std::int32_t r = kHalf, g = kHalf, b = kHalf;
    for (int i = 0; i < t.taps; ++i, p += 3) {
      r += p[0] * w[i];
      g += p[1] * w[i];
      b += p[2] * w[i];
    }
    out[0] = clip8(r);
    out[1] = clip8(g);
    out[2] = clip8(b);
  }
}

void vertical_row_portable(const std::uint8_t* const* rows, const std::int16_t* w, int taps, std::uint8_t* out,
                           std::size_t begin, std::size_t n) {
  for (std::size_t j = begin; j < n; ++j) {
    std::int32_t acc = kHalf;
    for (int i = 0; i < taps; ++i) acc += rows[i][j] * w[i];
    out[j] = clip8(acc);
  }
}

#if DTRAIN_RESAMPLE_X86
// Weights of the horizontal pass in pairs, as pmaddwd wants them next to pixel pairs
// [r0 r1 g0 g1 b0 b1 0 0]: [w0 w1 w0 w1 w0 w1 0 0] per pair of taps, (taps + 1) / 2 pairs per
// output pixel (an odd count's last pair has w1 = 0).
std::vector<std::int16_t> pair_weights(const Taps& t, int out_width) {
  const int pairs = (t.taps + 1) / 2;
  std::vector<std::int16_t> out(static_cast<std::size_t>(out_width) * pairs * 8, 0);
  for (int x = 0; x < out_width; ++x)
    for (int p = 0; p < pairs; ++p) {
      const std::int16_t* w = &t.weights[static_cast<std::size_t>(x) * t.taps + 2 * p];
      std::int16_t* o = &out[(static_cast<std::size_t>(x) * pairs + p) * 8];
      for (int c = 0; c < 3; ++c) {
        o[2 * c] = w[0];
        o[2 * c + 1] = 2 * p + 1 < t.taps ? w[1] : std::int16_t{0};
      }
    }
  return out;
}

// Two rows of the horizontal pass (they share the weights; two independent sums per step also
// keep more of the pipeline busy): per pair of taps, one 8-byte load per row (two pixels and two
// bytes past them), one shuffle to [r0 r1 g0 g1 b0 b1 0 0], one pmaddwd. The loads read up to
// 5 bytes past a window's last pixel: the caller only comes here when the buffer has them.
[[gnu::target("ssse3")]] void horizontal_rows_ssse3(const std::uint8_t* in0, const std::uint8_t* in1, const Taps& t,
                                                    const std::int16_t* pair_w, std::uint8_t* out0, std::uint8_t* out1,
                                                    int out_width) {
  const int pairs = (t.taps + 1) / 2;
  const __m128i spread = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  const __m128i half = _mm_set1_epi32(kHalf);
  const auto* w = reinterpret_cast<const __m128i*>(pair_w);
  const auto store = [](__m128i acc, std::uint8_t* out) {
    acc = _mm_srai_epi32(acc, kWeightBits);
    const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(acc, acc), acc);  // saturates to 0..255
    const auto rgb = static_cast<std::uint32_t>(_mm_cvtsi128_si32(bytes));
    out[0] = static_cast<std::uint8_t>(rgb);
    out[1] = static_cast<std::uint8_t>(rgb >> 8);
    out[2] = static_cast<std::uint8_t>(rgb >> 16);
  };
  for (int x = 0; x < out_width; ++x, out0 += 3, out1 += 3) {
    const std::size_t offset = 3 * std::size_t(t.first[x]);
    const std::uint8_t* p0 = in0 + offset;
    const std::uint8_t* p1 = in1 + offset;
    __m128i acc0 = half, acc1 = half;
    for (int j = 0; j < pairs; ++j, p0 += 6, p1 += 6, ++w) {
      const __m128i wj = _mm_loadu_si128(w);
      const __m128i px0 = _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0)), spread);
      const __m128i px1 = _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p1)), spread);
      acc0 = _mm_add_epi32(acc0, _mm_madd_epi16(px0, wj));
      acc1 = _mm_add_epi32(acc1, _mm_madd_epi16(px1, wj));
    }
    store(acc0, out0);
    store(acc1, out1);
  }
}

bool has_ssse3() {
  static const bool yes = __builtin_cpu_supports("ssse3");
  return yes;
}

// One output row of the vertical pass, 16 bytes at a time (SSE2, always there on x86-64): rows
// in pairs, interleaved bytewise, widened to int16 and multiplied by [w_i w_i+1] with pmaddwd,
// so the four int32 accumulators stay in registers across the taps.
void vertical_row_sse2(const std::uint8_t* const* rows, const std::int16_t* w, int taps, std::uint8_t* out,
                       std::size_t n) {
  const __m128i zero = _mm_setzero_si128();
  const __m128i half = _mm_set1_epi32(kHalf);
  std::size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m128i a0 = half, a1 = half, a2 = half, a3 = half;
    for (int i = 0; i < taps; i += 2) {
      const bool pair = i + 1 < taps;
      const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + j));
      const __m128i r1 = pair ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i + 1] + j)) : zero;
      const auto w1 = pair ? static_cast<std::uint16_t>(w[i + 1]) : std::uint16_t{0};
      const __m128i wv = _mm_set1_epi32(static_cast<int>(static_cast<std::uint16_t>(w[i]) | (std::uint32_t{w1} << 16)));
      const __m128i lo = _mm_unpacklo_epi8(r0, r1), hi = _mm_unpackhi_epi8(r0, r1);
      a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi8(lo, zero), wv));
      a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi8(lo, zero), wv));
      a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi8(hi, zero), wv));
      a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi8(hi, zero), wv));
    }
    const __m128i lo16 = _mm_packs_epi32(_mm_srai_epi32(a0, kWeightBits), _mm_srai_epi32(a1, kWeightBits));
    const __m128i hi16 = _mm_packs_epi32(_mm_srai_epi32(a2, kWeightBits), _mm_srai_epi32(a3, kWeightBits));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), _mm_packus_epi16(lo16, hi16));
  }
  vertical_row_portable(rows, w, taps, out, j, n);
}
#endif

Image run(const Image& source, double x0, double y0, double width, double height, int out_width, int out_height,
          bool simd) {
  const Taps horizontal = compute_taps(source.width, x0, x0 + width, out_width);
  const Taps vertical = compute_taps(source.height, y0, y0 + height, out_height);
  // Only the rows the vertical pass reads go through the horizontal one.
  const int row0 = vertical.first.front();
  const int row1 = vertical.first.back() + vertical.taps;
  Image rows = Image::blank(out_width, row1 - row0);
#if DTRAIN_RESAMPLE_X86
  const bool ssse3 = simd && has_ssse3();
  const std::vector<std::int16_t> pair_w = ssse3 ? pair_weights(horizontal, out_width) : std::vector<std::int16_t>{};
  // What the SIMD loads of a row read, from the row's start: up to the last window, plus 8 bytes.
  const std::size_t reach = 3 * std::size_t(horizontal.first.back()) + 6 * std::size_t((horizontal.taps + 1) / 2) + 2;
  const std::uint8_t* end = source.pixels.data() + source.pixels.size();
#endif
  int y = row0;
#if DTRAIN_RESAMPLE_X86
  // Rows two at a time, while the second one's loads stay inside the buffer.
  for (; ssse3 && y + 1 < row1 && source.row(y + 1) + reach <= end; y += 2)
    horizontal_rows_ssse3(source.row(y), source.row(y + 1), horizontal, pair_w.data(), rows.row(y - row0),
                          rows.row(y + 1 - row0), out_width);
#endif
  for (; y < row1; ++y) horizontal_row_portable(source.row(y), horizontal, rows.row(y - row0), out_width);

  Image out = Image::blank(out_width, out_height);
  const std::size_t n = std::size_t(out_width) * 3;
  std::vector<const std::uint8_t*> tap_rows(vertical.taps);
  for (int y = 0; y < out_height; ++y) {
    for (int i = 0; i < vertical.taps; ++i) tap_rows[i] = rows.row(vertical.first[y] - row0 + i);
    const std::int16_t* w = &vertical.weights[std::size_t(y) * vertical.taps];
#if DTRAIN_RESAMPLE_X86
    if (simd) {
      vertical_row_sse2(tap_rows.data(), w, vertical.taps, out.row(y), n);
      continue;
    }
#endif
    vertical_row_portable(tap_rows.data(), w, vertical.taps, out.row(y), 0, n);
  }
  return out;
}

}  // namespace

Image resample(const Image& source, double x0, double y0, double width, double height, int out_width, int out_height) {
  return run(source, x0, y0, width, height, out_width, out_height, true);
}

Image resample_portable(const Image& source, double x0, double y0, double width, double height, int out_width,
                        int out_height) {
  return run(source, x0, y0, width, height, out_width, out_height, false);
}

}  // namespace dtrain::data::detail
