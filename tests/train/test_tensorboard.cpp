// TensorBoard event files, read back by a small TFRecord and protobuf reader written here
// from the format's description (ctest tensorboard.python_reader runs TensorBoard's own):
// the CRC-32C check values, the record framing, the file-version event, scalars, errors.
#include "dtrain/core/error.h"
#include "dtrain/train/tensorboard.h"
#include "support/test_support.h"
#include "train/crc32c.h"

#include <bit>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <optional>
#include <regex>

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

struct Event {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;
  std::string tag;
  std::optional<float> simple_value;
};

std::uint64_t little_endian(const std::string& bytes, std::size_t at, int size) {
  REQUIRE(at + size <= bytes.size());
  std::uint64_t value = 0;
  for (int i = 0; i < size; ++i) value |= std::uint64_t(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return value;
}

// A cursor over the fields of one protocol-buffer message: keys and values, read in order.
class Fields {
 public:
  explicit Fields(const std::string& bytes) : bytes_(bytes) {}
  bool done() const { return at_ == bytes_.size(); }
  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0;; shift += 7) {
      REQUIRE(at_ < bytes_.size());
      auto byte = static_cast<unsigned char>(bytes_[at_++]);
      value |= std::uint64_t(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
  }
  std::uint64_t fixed(int size) {
    std::uint64_t value = little_endian(bytes_, at_, size);
    at_ += size;
    return value;
  }
  std::string bytes() {
    std::size_t size = varint();
    REQUIRE(at_ + size <= bytes_.size());
    std::string value = bytes_.substr(at_, size);
    at_ += size;
    return value;
  }

 private:
  const std::string& bytes_;
  std::size_t at_ = 0;
};

Event decode_event(const std::string& bytes) {
  Event event;
  Fields fields(bytes);
  while (!fields.done()) {
    std::uint64_t key = fields.varint();
    switch (key) {
      case (1 << 3) | 1: event.wall_time = std::bit_cast<double>(fields.fixed(8)); break;
      case (2 << 3) | 0: event.step = static_cast<std::int64_t>(fields.varint()); break;
      case (3 << 3) | 2: event.file_version = fields.bytes(); break;
      case (5 << 3) | 2: {
        std::string summary = fields.bytes();
        Fields summary_fields(summary);
        REQUIRE(summary_fields.varint() == ((1 << 3) | 2));  // exactly one Summary.Value
        std::string value = summary_fields.bytes();
        REQUIRE(summary_fields.done());
        Fields value_fields(value);
        while (!value_fields.done()) {
          std::uint64_t value_key = value_fields.varint();
          if (value_key == ((1 << 3) | 2)) {
            event.tag = value_fields.bytes();
          } else {
            REQUIRE(value_key == ((2 << 3) | 5));
            event.simple_value = std::bit_cast<float>(static_cast<std::uint32_t>(value_fields.fixed(4)));
          }
        }
        break;
      }
      default: FAIL("unexpected Event field key " << key);
    }
  }
  return event;
}

// The TFRecords of a file, each CRC checked: u64 length, masked CRC of it, data, masked CRC.
std::vector<std::string> read_records(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  for (std::size_t at = 0; at < file.size();) {
    std::uint64_t length = little_endian(file, at, 8);
    CHECK(little_endian(file, at + 8, 4) == train::crc32c::mask(train::crc32c::compute(file.data() + at, 8)));
    REQUIRE(at + 12 + length + 4 <= file.size());
    std::string data = file.substr(at + 12, length);
    CHECK(little_endian(file, at + 12 + length, 4) ==
          train::crc32c::mask(train::crc32c::compute(data.data(), data.size())));
    records.push_back(data);
    at += 12 + length + 4;
  }
  return records;
}

std::vector<std::filesystem::path> files_in(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path());
  return files;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TEST_CASE("tensorboard: CRC-32C gives the published check values, masked as TFRecord masks them", "[train][cpu]") {
  // RFC 3720 (iSCSI) B.4 and the CRC catalogue's check value for "123456789".
  CHECK(train::crc32c::compute("123456789", 9) == 0xE3069283u);
  std::string zeros(32, '\0'), ones(32, '\xFF');
  CHECK(train::crc32c::compute(zeros.data(), zeros.size()) == 0x8A9136AAu);
  CHECK(train::crc32c::compute(ones.data(), ones.size()) == 0x62A8AB43u);
  CHECK(train::crc32c::compute("", 0) == 0u);
  // ((crc >> 15) | (crc << 17)) + 0xa282ead8, modulo 2^32.
  CHECK(train::crc32c::mask(0) == 0xA282EAD8u);
  CHECK(train::crc32c::mask(0xE3069283u) == 0xC78AB0E5u);
}

TEST_CASE("tensorboard: the writer names its file as TensorFlow does and starts it with the file version",
          "[train][cpu]") {
  test::TempDir tmp;
  auto dir = tmp / "runs/a";  // created with its parent
  double before = now_seconds();
  train::TensorBoardWriter writer(dir, "rank1");
  writer.add_scalar("loss", 2.5, 0);
  writer.flush();  // visible before the writer closes

  auto files = files_in(dir);
  REQUIRE(files.size() == 1);
  CHECK(files[0] == writer.path());
  CHECK(std::regex_match(files[0].filename().string(), std::regex(R"(events\.out\.tfevents\.\d{10}\..+\.rank1)")));
  auto records = read_records(files[0]);
  REQUIRE(records.size() == 2);
  Event version = decode_event(records[0]);
  CHECK(version.file_version == "brain.Event:2");
  CHECK(version.step == 0);
  CHECK(version.wall_time >= std::floor(before));
  CHECK(version.wall_time <= now_seconds());
  CHECK_FALSE(version.simple_value);
}

TEST_CASE("tensorboard: scalars decode back to their tag, value, step and wall time", "[train][cpu]") {
  test::TempDir tmp;
  std::filesystem::path path;
  double before = now_seconds();
  {
    train::TensorBoardWriter writer(tmp.path());
    path = writer.path();
    writer.add_scalar("loss", 0.25, 7);
    writer.add_scalar("train/samples_per_second", 12345.678, 1'000'000'000'000);
    writer.add_scalar("lr", 1e-3, -1);  // a negative step takes protobuf's 10-byte varint
    writer.add_scalar("", 0, 0);
  }  // the destructor flushes
  double after = now_seconds();
  CHECK(path.filename().string().back() != '.');  // no suffix, no trailing dot

  auto records = read_records(path);
  REQUIRE(records.size() == 5);
  struct Expected {
    std::string tag;
    float value;
    std::int64_t step;
  };
  std::vector<Expected> expected = {{"loss", 0.25f, 7},
                                    {"train/samples_per_second", 12345.678f, 1'000'000'000'000},
                                    {"lr", 1e-3f, -1},
                                    {"", 0.0f, 0}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("scalar " << i);
    Event event = decode_event(records[i + 1]);
    CHECK(event.tag == expected[i].tag);
    REQUIRE(event.simple_value);
    CHECK(*event.simple_value == expected[i].value);  // exactly: float in, float out
    CHECK(event.step == expected[i].step);
    CHECK(event.wall_time >= before);
    CHECK(event.wall_time <= after);
    CHECK(event.file_version.empty());
  }
}

TEST_CASE("tensorboard: the writer fails naming a directory it cannot create", "[train][cpu]") {
  test::TempDir tmp;
  test::write_file(tmp / "plain", "a file, not a directory");
  auto dir = tmp / "plain" / "runs";
  REQUIRE_THROWS_MATCHES(train::TensorBoardWriter(dir), Error,
                         Catch::Matchers::Predicate<Error>(
                             [&](const Error& e) {
                               return e.message().find("TensorBoard directory '" + dir.string() +
                                                       "': cannot create it") != std::string::npos;
                             },
                             "names the directory"));
}
