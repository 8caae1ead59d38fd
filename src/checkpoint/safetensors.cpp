#include "dtrain/checkpoint/safetensors.h"

#include "dtrain/core/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>

namespace dtrain::checkpoint {

static_assert(std::endian::native == std::endian::little, "safetensors stores little-endian bytes");

namespace {

constexpr std::pair<DType, const char*> kDTypes[] = {
    {DType::f32, "F32"}, {DType::f64, "F64"}, {DType::i64, "I64"}, {DType::i32, "I32"},
    {DType::u8, "U8"},   {DType::f16, "F16"}, {DType::bf16, "BF16"},
};

// A header larger than this is not a checkpoint's (100 MB, the Python reader's own limit).
constexpr std::uint64_t kMaxHeader = 100'000'000;

DType parse_dtype(const std::string& origin, const std::string& name, const std::string& text) {
  for (const auto& [dtype, label] : kDTypes) {
    if (text == label) return dtype;
  }
  DTRAIN_FAIL("{}: tensor '{}' has dtype \"{}\", which dtrain does not read (F32, F64, F16, BF16, I64, I32, U8)",
              origin, name, text);
}

}  // namespace

const char* safetensors_dtype(DType dtype) {
  for (const auto& [d, label] : kDTypes) {
    if (d == dtype) return label;
  }
  DTRAIN_FAIL("safetensors: no name for dtype {}", dtype_name(dtype));
}

std::string safetensors_header(const NamedTensors& tensors, const Metadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    DTRAIN_CHECK(name != "__metadata__", "safetensors: a tensor cannot be named __metadata__");
    DTRAIN_CHECK(seen.insert(name).second, "safetensors: tensor '{}' appears twice", name);
    DTRAIN_CHECK(t.defined(), "safetensors: tensor '{}' is undefined", name);
    const std::uint64_t size = t.nbytes();
    header[name] = {{"dtype", safetensors_dtype(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string json = header.dump();
  // The data section starts 8-aligned, as the Python writer aligns it.
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const std::uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json;
}

void write_safetensors(AtomicFile& out, const NamedTensors& tensors, const Metadata& metadata) {
  out.write(safetensors_header(tensors, metadata));
  for (const auto& [name, t] : tensors) {
    const Tensor host = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu()).contiguous();
    out.write(host.raw_data(), host.nbytes());
  }
}

SafetensorsFile SafetensorsFile::read(const std::filesystem::path& path) {
  return parse(path.string(), read_file_bytes(path));
}

SafetensorsFile SafetensorsFile::parse(std::string origin, std::vector<std::uint8_t> bytes) {
  SafetensorsFile f;
  f.origin_ = std::move(origin);
  const std::string& o = f.origin_;
  DTRAIN_CHECK(bytes.size() >= 8, "{}: {} bytes is too short for a safetensors file (an 8-byte header length first)",
               o, bytes.size());
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  DTRAIN_CHECK(n <= kMaxHeader, "{}: the header length {} is over the limit of {} bytes: not a safetensors file?", o,
               n, kMaxHeader);
  DTRAIN_CHECK(n <= bytes.size() - 8, "{}: the header claims {} bytes but the file has {} after the length: truncated",
               o, n, bytes.size() - 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const nlohmann::json::exception& e) {
    DTRAIN_FAIL("{}: the header is not valid JSON: {}", o, e.what());
  }
  DTRAIN_CHECK(header.is_object(), "{}: the header must be a JSON object, got {}", o, header.type_name());
  f.data_start_ = 8 + static_cast<std::size_t>(n);
  const std::uint64_t data_size = bytes.size() - f.data_start_;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      DTRAIN_CHECK(value.is_object(), "{}: __metadata__ must be an object of strings", o);
      for (const auto& [key, text] : value.items()) {
        DTRAIN_CHECK(text.is_string(), "{}: __metadata__ entry '{}' must be a string", o, key);
        f.metadata_[key] = text.get<std::string>();
      }
      continue;
    }
    DTRAIN_CHECK(value.is_object() && value.contains("dtype") && value.contains("shape") &&
                     value.contains("data_offsets"),
                 "{}: tensor '{}' needs \"dtype\", \"shape\" and \"data_offsets\"", o, name);
    const auto& dtype = value["dtype"];
    const auto& shape = value["shape"];
    const auto& offsets = value["data_offsets"];
    DTRAIN_CHECK(dtype.is_string(), "{}: tensor '{}': dtype must be a string", o, name);
    DTRAIN_CHECK(shape.is_array(), "{}: tensor '{}': shape must be an array", o, name);
    DTRAIN_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                     offsets[1].is_number_unsigned(),
                 "{}: tensor '{}': data_offsets must be two unsigned integers", o, name);
    Entry e{.name = name, .dtype = parse_dtype(o, name, dtype.get<std::string>()), .shape = {}};
    // The element count, refusing overflow: a corrupt shape must not wrap around to a small
    // size. A zero anywhere makes an empty tensor, whatever the other dimensions.
    bool empty = false;
    for (const auto& d : shape) {
      DTRAIN_CHECK(d.is_number_unsigned(), "{}: tensor '{}': every dimension must be an unsigned integer", o, name);
      const std::uint64_t v = d.get<std::uint64_t>();
      DTRAIN_CHECK(v <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
                   "{}: tensor '{}': dimension {} is out of range", o, name, v);
      empty = empty || v == 0;
      e.shape.push_back(static_cast<std::int64_t>(v));
    }
    std::uint64_t numel = empty ? 0 : 1;
    for (const std::int64_t v : e.shape) {
      if (empty) break;
      DTRAIN_CHECK(numel <= data_size / static_cast<std::uint64_t>(v),
                   "{}: tensor '{}': shape {} does not fit in the file's {} data bytes", o, name, shape.dump(),
                   data_size);
      numel *= static_cast<std::uint64_t>(v);
    }
    e.begin = offsets[0].get<std::uint64_t>();
    e.end = offsets[1].get<std::uint64_t>();
    DTRAIN_CHECK(e.begin <= e.end && e.end <= data_size,
                 "{}: tensor '{}': data_offsets [{}, {}] lie outside the {} data bytes (truncated file?)", o, name,
                 e.begin, e.end, data_size);
    DTRAIN_CHECK(e.end - e.begin == numel * dtype_size(e.dtype),
                 "{}: tensor '{}': shape {} of {} needs {} bytes, data_offsets give {}", o, name, shape.dump(),
                 dtype.get<std::string>(), numel * dtype_size(e.dtype), e.end - e.begin);
    f.index_[name] = f.entries_.size();
    f.entries_.push_back(std::move(e));
  }
  // The data section is exactly the tensors, without overlaps or holes (as the format requires).
  std::vector<const Entry*> sorted;
  for (const Entry& e : f.entries_) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t at = 0;
  for (const Entry* e : sorted) {
    DTRAIN_CHECK(e->begin == at, "{}: tensor '{}' starts at byte {} of the data, expected {} (overlap or gap)", o,
                 e->name, e->begin, at);
    at = e->end;
  }
  DTRAIN_CHECK(at == data_size, "{}: the tensors end at data byte {} but the file has {}: {}", o, at, data_size,
               at < data_size ? "trailing bytes" : "truncated");
  // Entries in file order, as written.
  std::sort(f.entries_.begin(), f.entries_.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (std::size_t i = 0; i < f.entries_.size(); ++i) f.index_[f.entries_[i].name] = i;
  f.bytes_ = std::move(bytes);
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

bool SafetensorsFile::contains(const std::string& name) const { return index_.count(name) != 0; }

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const auto it = index_.find(name);
  DTRAIN_CHECK(it != index_.end(), "{}: no tensor named '{}'", origin_, name);
  const Entry& e = entries_[it->second];
  Tensor t = Tensor::empty(e.shape, {e.dtype});
  if (e.end > e.begin) std::memcpy(t.raw_data(), bytes_.data() + data_start_ + e.begin, e.end - e.begin);
  return t;
}

}  // namespace dtrain::checkpoint
