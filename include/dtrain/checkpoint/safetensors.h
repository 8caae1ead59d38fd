// safetensors: the tensor file format of Hugging Face's `safetensors` package, which
// PyTorch users load with safetensors.torch.load_file. Layout: an 8-byte little-endian
// header length N, N bytes of JSON ({"name": {"dtype": "F32", "shape": [..],
// "data_offsets": [begin, end]}, ..., "__metadata__": {string: string}}), then the tensors'
// bytes, little-endian and row-major, each at its offsets from the end of the header.
//
//   checkpoint::write_safetensors(file, model.state_dict(), {{"format", "pt"}});
//   auto f = checkpoint::SafetensorsFile::read("model.safetensors");
//   Tensor w = f.tensor("fc1.weight");
//
// Reading validates everything before a tensor is made (the header's length, JSON shape,
// dtypes, shapes against offsets, overlaps and gaps, the file's length), so a truncated or
// corrupt file is an Error naming the origin and what is wrong, never a crash.
#pragma once

#include "dtrain/checkpoint/atomic_file.h"
#include "dtrain/tensor/tensor.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::checkpoint {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

// The format's name of a dtype ("F32", "BF16", ...), and back (throws on one dtrain lacks).
const char* safetensors_dtype(DType dtype);

// The header (JSON, padded with spaces to a multiple of 8 bytes, length prefix included)
// for `tensors` laid out in order; their bytes follow it. Names must be distinct and not
// "__metadata__".
std::string safetensors_header(const NamedTensors& tensors, const Metadata& metadata = {});
// Writes the header and then each tensor's bytes (CPU and contiguous: others are copied
// first) to `out`, which the caller commits.
void write_safetensors(AtomicFile& out, const NamedTensors& tensors, const Metadata& metadata = {});

class SafetensorsFile {
 public:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    std::uint64_t begin = 0, end = 0;  // offsets into the data section
  };

  // Parses and validates `bytes` (a whole file); `origin` names it in errors.
  static SafetensorsFile parse(std::string origin, std::vector<std::uint8_t> bytes);
  // Reads and parses the file at `path`.
  static SafetensorsFile read(const std::filesystem::path& path);

  const std::string& origin() const { return origin_; }
  const std::vector<Entry>& entries() const { return entries_; }  // in file order
  std::vector<std::string> names() const;
  const Metadata& metadata() const { return metadata_; }
  bool contains(const std::string& name) const;
  // A CPU copy of the tensor `name`; throws naming the file when it has none.
  Tensor tensor(const std::string& name) const;

 private:
  std::string origin_;
  std::vector<std::uint8_t> bytes_;
  std::size_t data_start_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, std::size_t> index_;
  Metadata metadata_;
};

}  // namespace dtrain::checkpoint
