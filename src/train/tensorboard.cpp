// The few protocol-buffer fields TensorBoard needs are encoded by hand (below): protobuf
// would bring protoc, generated code and libprotobuf into the build for four fields of
// tensorflow/core/util/event.proto and summary.proto:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
// Each event is one TFRecord: u64 length, masked CRC-32C of the length, the bytes, masked
// CRC-32C of the bytes (little-endian throughout).
#include "dtrain/train/tensorboard.h"

#include "dtrain/core/error.h"
#include "train/crc32c.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>

namespace dtrain::train {
namespace {

enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, std::uint64_t value) {
  for (; value >= 0x80; value >>= 7) out += static_cast<char>((value & 0x7F) | 0x80);
  out += static_cast<char>(value);
}

void put_little_endian(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
}

void put_key(std::string& out, std::uint32_t field, WireType type) { put_varint(out, (field << 3) | type); }

void put_bytes(std::string& out, std::uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// An Event with its wall time (now) and step; the caller appends its payload field.
std::string event_head(std::int64_t step) {
  double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string event;
  put_key(event, 1, kFixed64);
  put_little_endian(event, std::bit_cast<std::uint64_t>(now), 8);
  put_key(event, 2, kVarint);
  put_varint(event, static_cast<std::uint64_t>(step));  // negative steps: 10 bytes, as protobuf does
  return event;
}

std::string hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir, std::string_view suffix) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  DTRAIN_CHECK(!error, "TensorBoard directory '{}': cannot create it ({})", dir.string(), error.message());
  auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string name = fmt::format("events.out.tfevents.{}.{}", seconds, hostname());
  if (!suffix.empty()) name += fmt::format(".{}", suffix);
  path_ = dir / name;
  // "x": never truncate another writer's file (same second, host and suffix).
  file_ = std::fopen(path_.c_str(), "wbx");
  DTRAIN_CHECK(file_ != nullptr, "TensorBoard event file '{}': cannot create it ({}{})", path_.string(),
               std::strerror(errno), errno == EEXIST ? "; give each writer of this directory its own suffix" : "");
  std::string event = event_head(0);
  put_bytes(event, 3, "brain.Event:2");
  write_record(event);
}

TensorBoardWriter::~TensorBoardWriter() {
  try {
    flush();
  } catch (const Error& e) {
    spdlog::warn("{}", e.message());
  }
  std::fclose(file_);
}

void TensorBoardWriter::add_scalar(std::string_view tag, double value, std::int64_t step) {
  std::string scalar;
  put_bytes(scalar, 1, tag);
  put_key(scalar, 2, kFixed32);
  put_little_endian(scalar, std::bit_cast<std::uint32_t>(static_cast<float>(value)), 4);
  std::string summary;
  put_bytes(summary, 1, scalar);
  std::string event = event_head(step);
  put_bytes(event, 5, summary);
  write_record(event);
}

void TensorBoardWriter::flush() {
  DTRAIN_CHECK(std::fflush(file_) == 0, "TensorBoard event file '{}': write failed ({})", path_.string(),
               std::strerror(errno));
}

void TensorBoardWriter::write_record(const std::string& event) {
  std::string record;
  put_little_endian(record, event.size(), 8);
  put_little_endian(record, crc32c::mask(crc32c::compute(record.data(), 8)), 4);
  record += event;
  put_little_endian(record, crc32c::mask(crc32c::compute(event.data(), event.size())), 4);
  DTRAIN_CHECK(std::fwrite(record.data(), 1, record.size(), file_) == record.size(),
               "TensorBoard event file '{}': write failed ({})", path_.string(), std::strerror(errno));
}

}  // namespace dtrain::train
