#include "data/idx_files.h"
#include "dtrain/data/tar_shards.h"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>

using namespace dtrain;
using namespace dtrain::data;
using dtrain::test::read_file;
using dtrain::test::require_error;
using dtrain::test::TempDir;
using dtrain::test::write_file;
namespace fs = std::filesystem;

namespace {

std::vector<std::uint8_t> pattern_bytes(std::size_t size, std::uint32_t seed) {
  std::vector<std::uint8_t> bytes(size);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : bytes) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::uint8_t>(x >> 24);
  }
  return bytes;
}

std::vector<std::uint8_t> text_bytes(const std::string& s) { return {s.begin(), s.end()}; }

// Samples as the converter writes them: an image-like "jpg" of varied size (empty, around a
// tar block, a few blocks) and a "cls" label.
std::vector<ShardSample> make_samples(int count) {
  const std::size_t sizes[] = {0, 1, 511, 512, 513, 3000, 1024, 77};
  std::vector<ShardSample> samples;
  for (int i = 0; i < count; ++i) {
    samples.push_back({fmt::format("{:09d}", i),
                       {{"jpg", pattern_bytes(sizes[i % 8], static_cast<std::uint32_t>(i))},
                        {"cls", text_bytes(std::to_string(i % 10))}}});
  }
  return samples;
}

std::vector<ShardInfo> write_samples(const fs::path& dir, const std::vector<ShardSample>& samples,
                                     std::int64_t max_bytes) {
  TarShardWriter writer(dir, max_bytes);
  for (const auto& s : samples) writer.write(s);
  return writer.finish();
}

std::vector<ShardSample> read_all(const std::vector<ShardInfo>& shards) {
  std::vector<ShardSample> samples;
  for (const auto& info : shards) {
    TarShardReader reader(info.path);
    ShardSample s;
    while (reader.next(s)) samples.push_back(s);
  }
  return samples;
}

void require_same(const std::vector<ShardSample>& actual, const std::vector<ShardSample>& expected) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    INFO("sample " << i);
    CHECK(actual[i].key == expected[i].key);
    REQUIRE(actual[i].members.size() == expected[i].members.size());
    for (std::size_t m = 0; m < actual[i].members.size(); ++m) {
      CHECK(actual[i].members[m].extension == expected[i].members[m].extension);
      CHECK(actual[i].members[m].bytes == expected[i].members[m].bytes);
    }
  }
}

// A tar written directly with libarchive, for members TarShardWriter refuses to write.
struct RawMember {
  std::string name;
  std::string data;
  bool directory = false;
};
void write_raw_tar(const fs::path& path, const std::vector<RawMember>& members) {
  std::unique_ptr<archive, decltype(&archive_write_free)> a(archive_write_new(), archive_write_free);
  REQUIRE(archive_write_set_format_pax_restricted(a.get()) == ARCHIVE_OK);
  REQUIRE(archive_write_open_filename(a.get(), path.c_str()) == ARCHIVE_OK);
  for (const auto& m : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.name.c_str());
    archive_entry_set_filetype(e, m.directory ? AE_IFDIR : AE_IFREG);
    archive_entry_set_perm(e, 0755);
    archive_entry_set_size(e, static_cast<la_int64_t>(m.data.size()));
    REQUIRE(archive_write_header(a.get(), e) == ARCHIVE_OK);
    archive_entry_free(e);
    if (!m.data.empty())
      REQUIRE(archive_write_data(a.get(), m.data.data(), m.data.size()) == la_ssize_t(m.data.size()));
  }
  REQUIRE(archive_write_close(a.get()) == ARCHIVE_OK);
}

bool on_path(const std::string& program) {
  return std::system(("command -v " + program + " >/dev/null 2>&1").c_str()) == 0;
}

// The command's standard output; fails the test when it exits non-zero.
std::string run(const std::string& command) {
  std::unique_ptr<FILE, decltype(&pclose)> pipe(popen(command.c_str(), "r"), pclose);
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe.get())) out.append(buffer, n);
  INFO("command: " << command << "\noutput: " << out);
  REQUIRE(pclose(pipe.release()) == 0);
  return out;
}

void truncate_copy(const fs::path& from, const fs::path& to, std::size_t size) {
  write_file(to, read_file(from).substr(0, size));
}

}  // namespace

TEST_CASE("tar shards: samples written across several shards read back identical", "[cpu]") {
  TempDir dir;
  const auto samples = make_samples(40);
  const std::int64_t max_bytes = 8 * 1024;
  const auto shards = write_samples(dir.path(), samples, max_bytes);
  REQUIRE(shards.size() > 3);

  std::string expected_list;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    INFO("shard " << i);
    CHECK(shards[i].path == dir / fmt::format("shard-{:06d}.tar", i));
    CHECK(shards[i].bytes == static_cast<std::int64_t>(fs::file_size(shards[i].path)));
    CHECK(shards[i].bytes <= max_bytes);
    CHECK(shards[i].samples >= 1);
    total += shards[i].samples;
    expected_list += fmt::format("shard-{:06d}.tar\t{}\n", i, shards[i].samples);
  }
  CHECK(total == 40);
  CHECK(read_file(dir / "shards.txt") == expected_list);
  CHECK_FALSE(fs::exists(dir / fmt::format("shard-{:06d}.tar.partial", shards.size() - 1)));
  require_same(read_all(shards), samples);

  ShardSample first;
  TarShardReader reader(shards[0].path);
  REQUIRE(reader.next(first));
  REQUIRE(first.find("cls") != nullptr);
  CHECK(first.find("cls")->bytes == text_bytes("0"));
  CHECK(first.find("png") == nullptr);
}

TEST_CASE("tar shards: the same samples give byte-identical shards", "[cpu]") {
  TempDir a, b;
  const auto samples = make_samples(12);
  const auto shards_a = write_samples(a.path(), samples, 4096);
  const auto shards_b = write_samples(b.path(), samples, 4096);
  REQUIRE(shards_a.size() == shards_b.size());
  for (std::size_t i = 0; i < shards_a.size(); ++i) CHECK(read_file(shards_a[i].path) == read_file(shards_b[i].path));
}

TEST_CASE("tar shards: a sample larger than the maximum gets a shard of its own", "[cpu]") {
  TempDir dir;
  const auto samples = make_samples(6);  // samples 3..5 hold 512 to 3000 bytes
  const auto shards = write_samples(dir.path(), samples, 2048);
  for (const auto& s : shards) CHECK((s.samples == 1 || s.bytes <= 2048));
  CHECK(shards.back().samples == 1);  // the 3000-byte sample
  CHECK(shards.back().bytes > 2048);
  require_same(read_all(shards), samples);
}

TEST_CASE("tar shards: the writer refuses samples that would not read back, and a folder with shards", "[cpu]") {
  TempDir dir;
  {
    TarShardWriter writer(dir.path(), 1 << 20);
    require_error([&] { writer.write({"a.b", {{"jpg", {}}}}); }, {"key 'a.b'"});
    require_error([&] { writer.write({"", {{"jpg", {}}}}); }, {"key ''"});
    require_error([&] { writer.write({"k", {}}); }, {"sample 'k' has no members"});
    require_error([&] { writer.write({"k", {{"jpg", {}}, {"jpg", {}}}}); }, {"two 'jpg' members"});
    require_error([&] { writer.write({"k", {{"", {}}}}); }, {"extension ''"});
    writer.write({"dir.v1/k", {{"seg.png", text_bytes("x")}}});  // a '.' before the base name is fine
    const auto shards = writer.finish();
    const auto back = read_all(shards);
    REQUIRE(back.size() == 1);
    CHECK(back[0].key == "dir.v1/k");
    CHECK(back[0].members[0].extension == "seg.png");
  }
  require_error([&] { TarShardWriter again(dir.path(), 1 << 20); }, {dir.path().string(), "shard-000000.tar"});
}

TEST_CASE("tar shards: a writer unwound by an exception leaves no shard list or partial shard", "[cpu]") {
  TempDir dir;
  try {
    TarShardWriter writer(dir.path(), 1 << 20);
    writer.write(make_samples(1)[0]);
    throw std::runtime_error("the caller failed");
  } catch (const std::runtime_error&) {
  }
  CHECK_FALSE(fs::exists(dir / "shards.txt"));
  CHECK_FALSE(fs::exists(dir / "shard-000000.tar"));
  CHECK_FALSE(fs::exists(dir / "shard-000000.tar.partial"));
}

TEST_CASE("tar shards: the reader follows WebDataset's naming", "[cpu]") {
  TempDir dir;
  const fs::path tar = dir / "mixed.tar";
  write_raw_tar(tar, {{"train", "", true},
                      {"train/a.jpg", "A"},
                      {"train/a.cls", "1"},
                      {"train/b.seg.png", "B"},
                      {"train/a.txt", "again"}});  // a key that comes back later is a new sample
  TarShardReader reader(tar);
  ShardSample s;
  REQUIRE(reader.next(s));
  CHECK(s.key == "train/a");
  REQUIRE(s.members.size() == 2);
  CHECK(s.find("jpg")->bytes == text_bytes("A"));
  REQUIRE(reader.next(s));
  CHECK(s.key == "train/b");
  REQUIRE(s.members.size() == 1);
  CHECK(s.members[0].extension == "seg.png");
  REQUIRE(reader.next(s));
  CHECK(s.key == "train/a");
  CHECK(s.members[0].bytes == text_bytes("again"));
  CHECK_FALSE(reader.next(s));
  CHECK_FALSE(reader.next(s));

  for (const std::string name : {"README", "train/.hidden", "train/noext"}) {
    const fs::path bad = dir / "bad.tar";
    write_raw_tar(bad, {{"ok.jpg", "x"}, {name, "y"}});
    TarShardReader r(bad);
    require_error([&] { while (r.next(s)) {} }, {bad.string(), "member '" + name + "' has no key"});
  }
}

TEST_CASE("tar shards: skip passes over samples without reading them", "[cpu]") {
  TempDir dir;
  const auto samples = make_samples(10);
  const auto shards = write_samples(dir.path(), samples, 1 << 20);
  REQUIRE(shards.size() == 1);
  TarShardReader reader(shards[0].path);
  CHECK(reader.path() == shards[0].path);
  CHECK(reader.skip(0) == 0);
  CHECK(reader.skip(3) == 3);
  ShardSample s;
  REQUIRE(reader.next(s));
  CHECK(s.key == "000000003");
  CHECK(s.find("jpg")->bytes == samples[3].members[0].bytes);
  CHECK(reader.skip(2) == 2);
  REQUIRE(reader.next(s));
  CHECK(s.key == "000000006");
  CHECK(reader.skip(100) == 3);
  CHECK(reader.skip(1) == 0);
  CHECK_FALSE(reader.next(s));
}

TEST_CASE("tar shards: list_shards takes counts from shards.txt when it lists the files, else counts", "[cpu]") {
  TempDir dir;
  const auto shards = write_samples(dir.path(), make_samples(30), 8 * 1024);
  REQUIRE(shards.size() > 1);
  const auto check = [&](const std::vector<ShardInfo>& listed, std::int64_t first_count) {
    REQUIRE(listed.size() == shards.size());
    for (std::size_t i = 0; i < shards.size(); ++i) {
      CHECK(listed[i].path == shards[i].path);
      CHECK(listed[i].bytes == shards[i].bytes);
      CHECK(listed[i].samples == (i == 0 ? first_count : shards[i].samples));
    }
  };
  check(list_shards(dir.path()), shards[0].samples);

  // The counts come from the file: a (wrong) count there is believed without reading.
  std::string list;
  for (std::size_t i = 0; i < shards.size(); ++i)
    list += fmt::format("{}\t{}\n", shards[i].path.filename().string(), i == 0 ? 999 : shards[i].samples);
  write_file(dir / "shards.txt", list);
  check(list_shards(dir.path()), 999);

  // A list that names another file, or none at all: the shards are counted.
  write_file(dir / "shards.txt", list + "shard-999999.tar\t5\n");
  check(list_shards(dir.path()), shards[0].samples);
  write_file(dir / "shards.txt", "garbage");
  check(list_shards(dir.path()), shards[0].samples);
  fs::remove(dir / "shards.txt");
  check(list_shards(dir.path()), shards[0].samples);

  TempDir empty;
  write_file(empty / "notes.txt", "no shards here");
  require_error([&] { list_shards(empty.path()); }, {"no .tar files in '" + empty.path().string() + "'"});
  require_error([&] { list_shards(empty / "missing"); }, {(empty / "missing").string(), "not a directory"});
}

namespace {

// A shard of three samples, for the readers of plain tar files: its path and its samples.
struct ThreeSampleShard {
  TempDir dir;
  std::vector<ShardSample> samples = make_samples(3);
  std::string path;
  ThreeSampleShard() {
    const auto shards = write_samples(dir.path(), samples, 1 << 20);
    REQUIRE(shards.size() == 1);
    path = shards[0].path.string();
  }
};

}  // namespace

TEST_CASE("tar shards: the shards are plain tar files that tar reads", "[cpu]") {
  if (!on_path("tar")) {
    dtrain::test::skip_test_case("no tar on PATH");
    return;
  }
  const ThreeSampleShard shard;
  const std::string expected =
      "000000000.jpg\n000000000.cls\n000000001.jpg\n000000001.cls\n000000002.jpg\n000000002.cls\n";
  CHECK(run("tar -tf '" + shard.path + "'") == expected);
}

TEST_CASE("tar shards: the shards are plain tar files that Python's tarfile reads", "[cpu]") {
  if (!on_path("python3")) {
    dtrain::test::skip_test_case("no python3 on PATH");
    return;
  }
  const ThreeSampleShard shard;
  const std::string script =
      "import sys, tarfile\n"
      "with tarfile.open(sys.argv[1]) as t:\n"
      "    for m in t.getmembers():\n"
      "        print(m.name, m.size, oct(m.mode), m.isfile(), t.extractfile(m).read().hex())\n";
  std::string want;
  for (const auto& s : shard.samples)
    for (const auto& m : s.members)
      want += fmt::format("{}.{} {} 0o644 True {:02x}\n", s.key, m.extension, m.bytes.size(), fmt::join(m.bytes, ""));
  CHECK(run("python3 -c '" + script + "' '" + shard.path + "'") == want);
}

TEST_CASE("tar shards: truncated or non-tar files give errors naming them", "[cpu]") {
  TempDir dir;
  const auto samples = make_samples(6);  // sample 0: 0-byte jpg, 1-byte cls; sample 5: 3000-byte jpg
  const auto shards = write_samples(dir.path(), samples, 1 << 20);
  REQUIRE(shards.size() == 1);
  const std::size_t size = static_cast<std::size_t>(shards[0].bytes);
  // Member offsets: every member is a 512-byte header and its data padded to 512.
  std::size_t jpg5 = 0;
  for (int i = 0; i < 5; ++i)
    for (const auto& m : samples[i].members) jpg5 += 512 + (m.bytes.size() + 511) / 512 * 512;
  const fs::path mid_member = dir / "cut-mid-member.tar";
  truncate_copy(shards[0].path, mid_member, jpg5 + 512 + 1500);
  const fs::path mid_header = dir / "cut-mid-header.tar";
  truncate_copy(shards[0].path, mid_header, jpg5 + 100);
  REQUIRE(jpg5 + 512 + 3072 + 512 + 512 + 1024 == size);

  ShardSample s;
  {
    TarShardReader r(mid_member);
    require_error([&] { while (r.next(s)) {} }, {mid_member.string(), "reading member '000000005.jpg'"});
  }
  {
    TarShardReader r(mid_member);
    require_error([&] { r.skip(10); }, {mid_member.string(), "000000005.jpg"});
  }
  {
    TarShardReader r(mid_header);
    require_error([&] { while (r.next(s)) {} }, {mid_header.string(), "after '000000004.cls'"});
  }
  fs::remove(dir / "shards.txt");
  fs::remove(mid_header);
  fs::rename(mid_member, dir / "shard-000001.tar");
  require_error([&] { list_shards(dir.path()); }, {(dir / "shard-000001.tar").string()});

  const fs::path not_tar = dir / "not-a-tar.tar";
  write_file(not_tar, std::string(2000, 'x'));
  require_error([&] { TarShardReader r(not_tar); r.next(s); }, {not_tar.string()});
  require_error([&] { TarShardReader r(dir / "absent.tar"); }, {(dir / "absent.tar").string(), "no such file"});
}

TEST_CASE("tar shards: byte sizes parse with decimal and binary units", "[cpu]") {
  CHECK(parse_byte_size("1000") == 1000);
  CHECK(parse_byte_size("256MB") == 256'000'000);
  CHECK(parse_byte_size("1GB") == 1'000'000'000);
  CHECK(parse_byte_size("512KB") == 512'000);
  CHECK(parse_byte_size("512kb") == 512'000);
  CHECK(parse_byte_size("64 MiB") == 64 << 20);
  CHECK(parse_byte_size("2GiB") == std::int64_t{2} << 30);
  CHECK(parse_byte_size("1.5GB") == 1'500'000'000);
  CHECK(parse_byte_size("10B") == 10);
  for (const std::string bad : {"", "0", "MB", "12XB", "-5MB", "1.2.3GB", "1e9", "0.1B", "99999999999TB", " 5MB"})
    require_error([&] { parse_byte_size(bad); }, {"'" + bad + "' is not a byte size", "256MB"});
}

TEST_CASE("tar shards: class lists", "[cpu]") {
  TempDir dir;
  write_class_list(dir / "classes.txt", {"cat", "dog", "n01440764"});
  CHECK(read_file(dir / "classes.txt") == "cat\ndog\nn01440764\n");
  CHECK(read_class_list(dir / "classes.txt") == std::vector<std::string>{"cat", "dog", "n01440764"});
  write_file(dir / "crlf.txt", "a\r\nb\r\n");
  CHECK(read_class_list(dir / "crlf.txt") == std::vector<std::string>{"a", "b"});
  require_error([&] { read_class_list(dir / "missing.txt"); }, {(dir / "missing.txt").string(), "cannot open"});
  write_file(dir / "empty.txt", "");
  require_error([&] { read_class_list(dir / "empty.txt"); }, {(dir / "empty.txt").string(), "empty"});
  write_file(dir / "gap.txt", "a\n\nb\n");
  require_error([&] { read_class_list(dir / "gap.txt"); }, {(dir / "gap.txt").string(), "line 2 is empty"});
  write_file(dir / "twice.txt", "a\nb\na\n");
  require_error([&] { read_class_list(dir / "twice.txt"); }, {"'a' is listed twice (lines 1 and 3)"});
  require_error([&] { write_class_list(dir / "bad.txt", {"a", "b\nc"}); }, {(dir / "bad.txt").string()});
}
