// Writes the small seed inputs kept under fuzz/regressions/<target>/: valid files that reach
// each reader's success path (starting points for the fuzzer) and invalid ones that a
// reader must reject, each named for what it is. The output is the same on every run.
//
//   fuzz_make_seeds DIR      writes DIR/mnist/, DIR/jpeg/, DIR/tar_shards/, DIR/cluster_spec/,
//                            DIR/safetensors/
#include "dtrain/data/jpeg.h"
#include "dtrain/data/tar_shards.h"

#include <archive.h>
#include <archive_entry.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <jpeglib.h>

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fuzz_make_seeds: %s\n", what.c_str());
  std::exit(1);
}

void save(const fs::path& path, const Bytes& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) die("cannot write " + path.string());
  std::printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
}

Bytes load(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot read " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Bytes text(const std::string& s) { return {s.begin(), s.end()}; }

Bytes cut(Bytes b, std::size_t size) {
  b.resize(size);
  return b;
}

// ---- IDX / gzip ------------------------------------------------------------------------

void put_be32(Bytes& b, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<std::uint8_t>(v >> shift));
}

Bytes idx_images(std::uint32_t magic, std::uint32_t count, std::uint32_t rows, std::uint32_t cols, std::size_t pixels) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  for (std::size_t i = 0; i < pixels; ++i) b.push_back(static_cast<std::uint8_t>(i * 37));
  return b;
}

Bytes idx_labels(std::uint32_t magic, const Bytes& labels) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, static_cast<std::uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

// One gzip member with a zero mtime and no name: the same bytes on every run.
Bytes gzip(const Bytes& data) {
  z_stream z{};
  if (deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) die("deflateInit2");
  Bytes out(deflateBound(&z, static_cast<uLong>(data.size())));
  z.next_in = const_cast<Bytef*>(data.data());
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) die("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// fuzz_mnist's input: flags (bit 0, 1: image, label file gzip), the image file's 16-bit length.
Bytes mnist_input(int flags, const Bytes& images, const Bytes& labels) {
  Bytes b{static_cast<std::uint8_t>(flags), static_cast<std::uint8_t>(images.size() >> 8),
          static_cast<std::uint8_t>(images.size())};
  b.insert(b.end(), images.begin(), images.end());
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

void mnist_seeds(const fs::path& dir) {
  const Bytes images = idx_images(0x803, 2, 2, 2, 8), labels = idx_labels(0x801, {3, 7});
  save(dir / "valid-2-images-2x2", mnist_input(0, images, labels));
  save(dir / "valid-3x5-gzip", mnist_input(3, gzip(idx_images(0x803, 1, 3, 5, 15)), gzip(idx_labels(0x801, {9}))));
  save(dir / "valid-gzip-images-only", mnist_input(1, gzip(images), labels));
  Bytes two_members = gzip(cut(images, 10)), rest = gzip(Bytes(images.begin() + 10, images.end()));
  two_members.insert(two_members.end(), rest.begin(), rest.end());
  save(dir / "valid-gzip-two-members", mnist_input(1, two_members, labels));
  save(dir / "invalid-empty", {});
  save(dir / "invalid-image-magic", mnist_input(0, idx_images(0x801, 2, 2, 2, 8), labels));
  save(dir / "invalid-label-magic", mnist_input(0, images, idx_labels(0x803, {3, 7})));
  save(dir / "invalid-short-pixels", mnist_input(0, cut(images, images.size() - 1), labels));
  save(dir / "invalid-zero-rows", mnist_input(0, idx_images(0x803, 2, 0, 2, 0), labels));
  save(dir / "invalid-huge-side", mnist_input(0, idx_images(0x803, 1, 4097, 4097, 0), idx_labels(0x801, {1})));
  save(dir / "invalid-huge-count", mnist_input(0, idx_images(0x803, 0xffffffff, 4096, 4096, 0), labels));
  save(dir / "invalid-label-range", mnist_input(0, images, idx_labels(0x801, {3, 10})));
  save(dir / "invalid-count-mismatch", mnist_input(0, images, idx_labels(0x801, {3})));
  save(dir / "invalid-gzip-truncated", mnist_input(1, cut(gzip(images), 20), labels));
  Bytes bad_crc = gzip(images);
  bad_crc[bad_crc.size() - 6] ^= 1;
  save(dir / "invalid-gzip-crc", mnist_input(1, bad_crc, labels));
  save(dir / "invalid-gzip-name-plain-data", mnist_input(1, images, labels));
}

// ---- cluster spec ------------------------------------------------------------------------

void cluster_spec_seeds(const fs::path& dir) {
  save(dir / "valid-two-tasks.json", text(R"({"cluster": {"worker": ["localhost:2222"], "ps": ["localhost:2223"]}})"));
  save(dir / "valid-hosts-no-ports.json", text(R"({"cluster":{"ps":["b"],"worker":["a"]}})"));
  save(dir / "invalid-not-json.json", text(R"({"cluster": {"worker": ["a:1"],)"));
  save(dir / "invalid-array.json", text(R"([{"cluster": {}}])"));
  save(dir / "invalid-unknown-key.json", text(R"({"cluster": {"worker": ["a"], "ps": ["b"]}, "task": {"index": 0}})"));
  save(dir / "invalid-unknown-role.json", text(R"({"cluster": {"worker": ["a"], "ps": ["b"], "chief": ["c"]}})"));
  save(dir / "invalid-empty-list.json", text(R"({"cluster": {"worker": [], "ps": ["b"]}})"));
  save(dir / "invalid-entry-type.json", text(R"({"cluster": {"worker": [2222], "ps": ["b"]}})"));
  save(dir / "invalid-twice.json", text(R"({"cluster": {"worker": ["a:1"], "ps": ["a:1"]}})"));
  save(dir / "invalid-count.json", text(R"({"cluster": {"worker": ["a", "b"], "ps": ["c"]}})"));
}

// ---- JPEG ----------------------------------------------------------------------------------

dtrain::data::Image gradient(int width, int height) {
  auto image = dtrain::data::Image::blank(width, height);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      std::uint8_t* p = image.row(y) + 3 * x;
      p[0] = static_cast<std::uint8_t>(x * 255 / width);
      p[1] = static_cast<std::uint8_t>(y * 255 / height);
      p[2] = static_cast<std::uint8_t>((x + y) * 8);
    }
  return image;
}

// The encodings the project's encoder does not write: progressive, arithmetic-coded, with
// restart markers. libjpeg's default error handler exits, which a seed writer may.
Bytes encode_variant(const dtrain::data::Image& image, bool progressive, bool arithmetic, int restart_rows) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buffer, &size);
  c.image_width = static_cast<JDIMENSION>(image.width);
  c.image_height = static_cast<JDIMENSION>(image.height);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 75, TRUE);
  if (progressive) jpeg_simple_progression(&c);
  c.arith_code = arithmetic ? TRUE : FALSE;
  c.restart_in_rows = restart_rows;
  jpeg_start_compress(&c, TRUE);
  for (int y = 0; y < image.height; ++y) {
    JSAMPROW row = const_cast<std::uint8_t*>(image.row(y));
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  Bytes out(buffer, buffer + size);
  jpeg_destroy_compress(&c);
  std::free(buffer);
  return out;
}

void jpeg_seeds(const fs::path& dir) {
  using namespace dtrain::data;
  const Image image = gradient(16, 16), odd = gradient(17, 9);
  const Bytes colour = encode_jpeg(image, 90);
  save(dir / "valid-16x16-420.jpg", colour);
  save(dir / "valid-17x9-420.jpg", encode_jpeg(odd, 50));
  save(dir / "valid-8x8-gray.jpg", encode_jpeg(gradient(8, 8), 90, true));
  save(dir / "valid-16x16-cmyk.jpg", encode_jpeg_cmyk(image, 75));
  save(dir / "valid-16x16-ycck.jpg", encode_jpeg_cmyk(image, 75, true));
  save(dir / "valid-24x16-progressive.jpg", encode_variant(gradient(24, 16), true, false, 0));
  save(dir / "valid-16x24-arithmetic.jpg", encode_variant(gradient(16, 24), false, true, 0));
  save(dir / "valid-32x32-restarts.jpg", encode_variant(gradient(32, 32), false, false, 1));
  save(dir / "invalid-empty.jpg", {});
  save(dir / "invalid-png-signature.jpg", {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'});
  save(dir / "invalid-soi-only.jpg", {0xff, 0xd8});
  save(dir / "invalid-truncated.jpg", cut(colour, colour.size() / 2));
  save(dir / "invalid-no-eoi.jpg", cut(colour, colour.size() - 2));
  const Bytes progressive = encode_variant(gradient(24, 16), true, false, 0);
  save(dir / "invalid-progressive-truncated.jpg", cut(progressive, progressive.size() * 2 / 3));
  Bytes zero_size = colour;  // the SOF0 marker's height and width fields zeroed
  for (std::size_t i = 0; i + 9 < zero_size.size(); ++i)
    if (zero_size[i] == 0xff && zero_size[i + 1] == 0xc0) {
      for (std::size_t k = i + 5; k < i + 9; ++k) zero_size[k] = 0;
      break;
    }
  save(dir / "invalid-zero-size.jpg", zero_size);
}

// ---- tar shards -----------------------------------------------------------------------------

dtrain::data::ShardSample sample(const std::string& key, std::size_t jpg_bytes, const std::string& label) {
  Bytes jpg(jpg_bytes);
  for (std::size_t i = 0; i < jpg.size(); ++i) jpg[i] = static_cast<std::uint8_t>(i * 7);
  return {key, {{"jpg", jpg}, {"cls", text(label)}}};
}

// A shard as TarShardWriter writes it.
Bytes written_shard(const fs::path& scratch, const std::vector<dtrain::data::ShardSample>& samples) {
  fs::remove_all(scratch);
  {
    dtrain::data::TarShardWriter writer(scratch, 1 << 20);
    for (const auto& s : samples) writer.write(s);
    writer.finish();
  }
  Bytes bytes = load(scratch / "shard-000000.tar");
  fs::remove_all(scratch);
  return bytes;
}

// A tar that TarShardWriter would not write: `format` (pax, GNU), a directory entry, and a
// sparse member (data only at `sparse_offset` of a larger file) when sparse_offset >= 0.
Bytes libarchive_shard(int format, std::int64_t sparse_offset) {
  std::vector<std::uint8_t> out(64 * 1024);
  std::size_t used = 0;
  archive* a = archive_write_new();
  archive_write_set_format(a, format);
  archive_write_add_filter_none(a);
  archive_write_set_bytes_per_block(a, 0);
  if (archive_write_open_memory(a, out.data(), out.size(), &used) != ARCHIVE_OK) die(archive_error_string(a));
  const auto add = [&](const char* name, int type, const std::string& data, std::int64_t size) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, static_cast<unsigned>(type));
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, size);
    if (type == AE_IFREG && size != static_cast<std::int64_t>(data.size()))
      archive_entry_sparse_add_entry(e, sparse_offset, static_cast<la_int64_t>(data.size()));
    if (archive_write_header(a, e) != ARCHIVE_OK) die(archive_error_string(a));
    if (!data.empty()) archive_write_data(a, data.data(), data.size());
    archive_entry_free(e);
  };
  add("dir", AE_IFDIR, "", 0);
  add("dir/000001.cls", AE_IFREG, "4", 1);
  add("dir/000001.seg.png", AE_IFREG, "not a png", 9);
  if (sparse_offset >= 0) add("000002.bin", AE_IFREG, "sparse data", sparse_offset + 11);
  archive_write_close(a);
  archive_write_free(a);
  out.resize(used);
  return out;
}

void tar_seeds(const fs::path& dir, const fs::path& scratch) {
  const Bytes two = written_shard(scratch, {sample("000000", 600, "3"), sample("000001", 10, "7")});
  save(dir / "valid-two-samples.tar", two);
  save(dir / "valid-long-key-pax.tar", written_shard(scratch, {sample(std::string(120, 'k'), 0, "1")}));
  save(dir / "valid-gnu-dir.tar", libarchive_shard(ARCHIVE_FORMAT_TAR_GNUTAR, -1));
  const Bytes sparse = libarchive_shard(ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, 1000);
  save(dir / "valid-pax-sparse.tar", sparse);
  // The sparse map (GNU format 1.0: at the start of the member's data, "<blocks>\n<offset>\n
  // <size>\n...") moved to 1 TiB, past the member's size; and a map and size consistently 1 TiB.
  const std::string map = "1\n1000\n11\n", far = "1\n1099511627776\n11\n";
  Bytes far_map = sparse;
  const auto at = std::search(far_map.begin(), far_map.end(), map.begin(), map.end());
  if (at == far_map.end()) die("no sparse map in the sparse seed");
  std::copy(far.begin(), far.end(), at);
  save(dir / "invalid-sparse-map-past-size.tar", far_map);
  save(dir / "invalid-sparse-larger-than-shard.tar",
       libarchive_shard(ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, std::int64_t{1} << 40));
  save(dir / "invalid-empty.tar", {});
  save(dir / "invalid-text.tar", text("not a tar file\n"));
  save(dir / "invalid-truncated-data.tar", cut(two, 512 + 300));
  save(dir / "invalid-truncated-header.tar", cut(two, 2048 + 100));
  Bytes checksum = two;
  checksum[148] ^= 1;  // the first header's checksum field
  save(dir / "invalid-checksum.tar", checksum);
  Bytes no_key = two;
  no_key[0] = '.';  // "000000.jpg" becomes ".00000.jpg": a base name starting with '.'
  for (int i = 148; i < 156; ++i) no_key[i] = ' ';
  unsigned sum = 0;
  for (int i = 0; i < 512; ++i) sum += no_key[i];
  std::snprintf(reinterpret_cast<char*>(&no_key[148]), 8, "%06o", sum);
  save(dir / "invalid-no-key.tar", no_key);
}

// ---- safetensors ---------------------------------------------------------------------------

// The format by hand (not through the writer): an 8-byte little-endian header length, the JSON
// header, the data.
Bytes safetensors(const std::string& header, const Bytes& data) {
  Bytes b;
  const std::uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::uint8_t>(length >> (8 * i)));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void safetensors_seeds(const fs::path& dir) {
  const Bytes data24 = [] {
    Bytes d(24);
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<std::uint8_t>(i);
    return d;
  }();
  const std::string two = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                          R"("n":{"dtype":"I64","shape":[1],"data_offsets":[16,24]}})";
  save(dir / "valid-two-tensors.safetensors", safetensors(two, data24));
  save(dir / "valid-dtypes.safetensors",
       safetensors(R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[2],)"
                   R"("data_offsets":[4,8]},"i":{"dtype":"I32","shape":[2,1],"data_offsets":[8,16]},)"
                   R"("d":{"dtype":"F64","shape":[],"data_offsets":[16,24]},"e":{"dtype":"U8","shape":[0],)"
                   R"("data_offsets":[24,24]}})",
                   data24));
  save(dir / "valid-no-tensors.safetensors", safetensors("{}      ", {}));
  save(dir / "invalid-short.safetensors", {1, 0, 0});
  save(dir / "invalid-header-length-huge.safetensors", {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'});
  Bytes past_end = safetensors(two, data24);
  const std::uint64_t past = two.size() + data24.size() + 1;  // one byte more than the file holds
  for (int i = 0; i < 8; ++i) past_end[i] = static_cast<std::uint8_t>(past >> (8 * i));
  save(dir / "invalid-header-length-past-end.safetensors", past_end);
  save(dir / "invalid-header-not-json.safetensors", safetensors("{\"w\": ", {}));
  save(dir / "invalid-header-array.safetensors", safetensors("[]", {}));
  save(dir / "invalid-truncated-data.safetensors", cut(safetensors(two, data24), 8 + two.size() + 20));
  save(dir / "invalid-trailing-bytes.safetensors", safetensors(two, [&] {
         Bytes d = data24;
         d.push_back(0);
         return d;
       }()));
  save(dir / "invalid-unknown-dtype.safetensors",
       safetensors(R"({"w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", cut(data24, 4)));
  save(dir / "invalid-shape-offsets.safetensors",
       safetensors(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", cut(data24, 16)));
  save(dir / "invalid-overlap.safetensors",
       safetensors(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],)"
                   R"("data_offsets":[4,12]}})",
                   cut(data24, 12)));
  save(dir / "invalid-gap.safetensors",
       safetensors(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", cut(data24, 8)));
  save(dir / "invalid-negative-dim.safetensors",
       safetensors(R"({"a":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}})", cut(data24, 4)));
  save(dir / "invalid-huge-shape.safetensors",
       safetensors(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})",
                   cut(data24, 8)));
  save(dir / "invalid-number-overflow.safetensors",
       safetensors(R"({"a":{"dtype":"U8","shape":[1e999],"data_offsets":[0,4]}})", cut(data24, 4)));
  save(dir / "invalid-metadata-value.safetensors", safetensors(R"({"__metadata__":{"epoch":3}})", {}));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) die("usage: fuzz_make_seeds DIR");
  const fs::path out = argv[1];
  mnist_seeds(out / "mnist");
  cluster_spec_seeds(out / "cluster_spec");
  jpeg_seeds(out / "jpeg");
  tar_seeds(out / "tar_shards", fs::temp_directory_path() / "dtrain-fuzz-make-seeds");
  safetensors_seeds(out / "safetensors");
  return 0;
}
